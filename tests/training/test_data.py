"""The training data stream: vectorised blocks, the same windows for any split over ranks, workers and resumes,
simulated on the training device."""

from __future__ import annotations

import pytest
import torch
from fresh_process import run_check

from decode_mem.simulate.config import SimulationConfig
from decode_mem.train import data
from decode_mem.train.config import TrainConfig
from decode_mem.train.data import SimulatedBatches, batch_loader, block_size
from decode_mem.train.loop import simulation_device

CFG = SimulationConfig(frame_size=(16, 16), density=2.0)
KEYS = {"frames", "em", "mask", "bg", "read_var", "level_noise"}


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys() == KEYS
    for key in a:
        assert torch.equal(a[key].cpu(), b[key].cpu()), key


def test_block_size_bounds_the_pixels_of_one_call() -> None:
    assert block_size((40, 40)) == 64  # the generalist's windows: one call per batch of 64
    assert block_size((512, 512)) == 2 and block_size((2048, 2048)) == 1
    for size in ((40, 40), (128, 96), (512, 512)):
        b = block_size(size)
        assert b & (b - 1) == 0 and (b == 1 or b * 3 * size[0] * size[1] <= data.BLOCK_PIXELS)


def test_ranks_see_exactly_the_windows_of_one_process(monkeypatch) -> None:
    monkeypatch.setattr(data, "BLOCK_MAX", 4)  # blocks [0, 4), [4, 8), [8, 10): ranks straddle them
    whole = SimulatedBatches(CFG, 10, 1, seed=5).batch(3, 0)
    assert whole["frames"].shape[0] == 10
    ranks = [SimulatedBatches(CFG, 5, 1, seed=5, rank=r, world_size=2).batch(3, 0) for r in range(2)]
    assert_same(whole, {key: torch.cat([r[key] for r in ranks]) for key in whole})
    # and the blocks are real: one block's worth differs from the next
    assert not torch.equal(whole["frames"][:4], whole["frames"][4:8])


def test_the_stream_is_a_function_of_step_and_micro_batch(monkeypatch) -> None:
    stream = SimulatedBatches(CFG, 3, 2, seed=1, size_jitter=2)
    items = [next(it) for it in [iter(stream)] for _ in range(4)]
    assert_same(items[3], stream.batch(1, 1))
    resumed = next(iter(SimulatedBatches(CFG, 3, 2, seed=1, size_jitter=2, start_step=1)))
    assert_same(resumed, items[2])
    assert not torch.equal(items[0]["frames"], items[1]["frames"])
    seeds = [SimulatedBatches(CFG, 3, 2, seed=s).batch(0, 0)["frames"] for s in (1, 2)]
    assert not torch.equal(*seeds)


def test_worker_processes_give_the_same_stream() -> None:
    run_check(__file__, "_check_worker_processes_give_the_same_stream")  # a process of its own: tests/fresh_process.py


def _check_worker_processes_give_the_same_stream() -> None:
    stream = SimulatedBatches(CFG, 2, 1, seed=4)
    alone = [b for b, _ in zip(batch_loader(stream, num_workers=0, pin_memory=False), range(4), strict=False)]
    workers = batch_loader(stream, num_workers=2, pin_memory=False)
    for a in alone:
        assert_same(a, next(workers))


def test_windows_are_simulated_on_the_training_device_unless_workers_are_asked_for() -> None:
    cuda = torch.device("cuda")
    assert simulation_device(TrainConfig(), cuda) == cuda
    assert simulation_device(TrainConfig(num_workers=2), cuda) == torch.device("cpu")
    assert simulation_device(TrainConfig(), torch.device("cpu")) == torch.device("cpu")


@pytest.mark.gpu
def test_cuda_stream_is_on_the_device_and_reproducible() -> None:
    stream = SimulatedBatches(CFG, 64, 1, seed=7, device="cuda")
    a, b = stream.batch(2, 0), stream.batch(2, 0)
    assert all(v.is_cuda for v in a.values())
    cpu = SimulatedBatches(CFG, 64, 1, seed=7).batch(2, 0)
    assert {k: v.shape for k, v in a.items()} == {k: v.shape for k, v in cpu.items()}
    # the same windows again: emitters, cameras and noise from one seeded CUDA generator (the rendering's
    # atomic additions may round differently; the counts drawn from them are integers and practically equal)
    assert torch.equal(a["em"], b["em"]) and torch.equal(a["mask"], b["mask"]) and torch.equal(a["bg"], b["bg"])
    assert float((a["frames"] != b["frames"]).float().mean()) < 1e-4
