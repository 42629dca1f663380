"""The memory planner: its trace equals real allocations, predictions track measured peaks, 'auto' respects
the budget, settings that cannot fit are refused, and the CLI prints a plan."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch

from decode_mem.errors import ConfigError
from decode_mem.footprint import LiveBytes, choose_sizes, fingerprint, heap, parse_bytes, plan_inference, trace
from decode_mem.footprint.choose import PLAN_HEADROOM
from decode_mem.footprint.request import SizeRequest
from decode_mem.model import DecodeNet, ModelConfig
from decode_mem.plan.__main__ import main
from decode_mem.tiling import TileConfig, TiledExecutor

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def small() -> DecodeNet:
    torch.manual_seed(0)
    return DecodeNet(ModelConfig.small(use_z=False)).eval()


@pytest.mark.parametrize(("text", "expected"), [("2GiB", 2 * 2**30), ("800MiB", 800 * 2**20), ("1.5 GB", 1.5e9),
                                               ("512M", 512 * 2**20), (1000, 1000), (None, None)])
def test_parse_bytes(text, expected) -> None:
    assert parse_bytes(text) == expected


def test_parse_bytes_rejects_nonsense() -> None:
    with pytest.raises(ConfigError, match="memory_limit"):
        parse_bytes("lots")


@pytest.mark.parametrize("block", [0, -3, True, 2.5])
def test_a_block_that_is_not_a_positive_integer_is_refused_with_the_sizes(block) -> None:
    with pytest.raises(ConfigError, match="block must be a positive integer or 'auto'"):
        SizeRequest(block=block)  # before any work (it was clamped to 1-frame blocks further down)


@pytest.mark.parametrize(("frame", "chunk", "batch"), [((96, 80), 32, 2), ((64, 64), 512, 3)])
def test_fake_trace_equals_real_tensor_bytes(small: DecodeNet, frame, chunk, batch) -> None:
    plan = plan_inference(small, frame, chunk_size=chunk, batch_size=batch, block=batch)
    ex = TiledExecutor(small, frame, TileConfig(chunk_size=chunk, batch_size=batch, block=batch))
    counter = LiveBytes()
    with counter:
        ex.run_unit(batch)
    assert plan.network_bytes == pytest.approx(counter.peak, rel=0.02)
    assert plan.n_tiles == len(ex.grid) and plan.tile_shape == ex.grid.tile_shape


def test_a_remembered_trace_is_not_reused_by_changed_network_code(small: DecodeNet, tmp_path: Path,
                                                                   monkeypatch) -> None:
    """An in-place activation changes a unit's memory without changing the architecture: the remembered trace
    is keyed by the network code's fingerprint as well."""
    package = tmp_path / "netcode"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "layers.py").write_text("ACTIVATION = 'elu'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(fingerprint, "NETWORK_CODE", ("netcode",))
    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "cache" / "throughput.json"))
    calls = []

    def traced() -> int:
        calls.append(1)
        return 100 * len(calls)

    assert fingerprint.remembered_trace(small, ["unit"], traced) == 100
    assert fingerprint.remembered_trace(small, ["unit"], traced) == 100 and len(calls) == 1  # remembered
    (package / "layers.py").write_text("ACTIVATION = 'elu_inplace'\n")
    assert fingerprint.remembered_trace(small, ["unit"], traced) == 200 and len(calls) == 2  # traced again


def test_a_whole_run_holds_no_more_tensors_than_its_traced_unit(small: DecodeNet, tmp_path: Path) -> None:
    """Several groups of tiles, each one unit: the last group's output and carried features are dead by the
    time the next unit runs, so the run's live-tensor peak is the planned unit's (margin included)."""
    from decode_mem.infer import predict_stack
    from decode_mem.io import open_stack
    from decode_mem.postprocess import MARGIN

    path = tmp_path / "s.tif"
    tifffile.imwrite(path, (100 + np.random.default_rng(0).poisson(50, (3, 160, 160))).astype(np.uint16),
                     photometric="minisblack")
    plans, counter = [], LiveBytes()
    with open_stack(path) as stack:
        for _ in predict_stack(stack, small, amp="off", chunk_size=32, batch_size=4):  # the traces are remembered now:
            pass  # the run below plans without fake tensors, which the counter would count
        with counter:
            for _ in predict_stack(stack, small, amp="off", chunk_size=32, batch_size=4, on_plan=plans.append):
                pass
    plan = plans[0].plan
    assert plan.n_tiles > 1 and plan.margin == MARGIN  # the executor's margin makes its tiles larger
    assert counter.peak == pytest.approx(plan.network_bytes, rel=0.05)


@pytest.mark.parametrize("amp", ["off", "bf16"])
def test_the_timed_unit_holds_no_more_than_the_planned_one(small: DecodeNet, amp: str) -> None:
    """The speed probe times a block's steady state, a unit that carries two frames' features; they were made
    outside autocast, so under bf16 they were fp32 and the probe held more than any unit of a real run, and
    more than the plan."""
    def traced(carried: bool) -> int:
        config = TileConfig(chunk_size=64, batch_size=2, block=16, amp=amp)
        with trace.fake_network(small) as (fake, counter):
            TiledExecutor(fake, (64, 64), config, device=CPU).unit(2, carried=carried)()
            return counter.peak

    assert traced(carried=True) <= traced(carried=False)


def test_memory_grows_with_tiles_and_batch_and_shrinks_with_bf16(small: DecodeNet) -> None:
    def net_bytes(**kw) -> int:
        return plan_inference(small, (512, 512), block=4, **kw).network_bytes

    assert net_bytes(chunk_size=128, batch_size=1) < net_bytes(chunk_size=256, batch_size=1)
    assert net_bytes(chunk_size=128, batch_size=1) < net_bytes(chunk_size=128, batch_size=4)
    assert net_bytes(chunk_size=256, batch_size=2, amp="bf16") < 0.8 * net_bytes(chunk_size=256, batch_size=2)


def test_a_short_stack_holds_only_the_blocks_it_has(small: DecodeNet) -> None:
    def blocks(n_frames: int | None) -> int:
        return plan_inference(small, (256, 256), chunk_size=256, batch_size=1, block=4, n_frames=n_frames,
                              trace=False).block_bytes

    frame_block = (4 + 2) * 256 * 256 * 2  # 4 frames and one context frame each side, uint16
    assert blocks(None) == 4 * frame_block  # computed, read ahead, being read, edge copy
    assert blocks(40) == 4 * frame_block
    assert blocks(8) == 3 * frame_block  # two blocks and the edge copy
    assert blocks(3) == 2 * 5 * 256 * 256 * 2  # one 3-frame block and its edge copy


def test_bf16_without_native_support_is_planned_with_its_fp32_buffers(small: DecodeNet, monkeypatch) -> None:
    import decode_mem.footprint.inference as inference
    from decode_mem.model import precision

    # without a working set measured here: an earlier test in this process may have measured one (the session's
    # cache), which the plan takes where it exceeds the emulation's factor
    plan = dataclasses.replace(plan_inference(small, (256, 256), chunk_size=128, batch_size=2, amp="bf16", block=4),
                               measured_ratio=None)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    native = plan.host_bytes
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    emulated = plan.host_bytes
    assert emulated - native == pytest.approx((inference.EMULATED_BF16 - 1) * plan.network_bytes, abs=1)


def test_auto_fits_the_limit_and_given_sizes_over_it_are_refused(small: DecodeNet) -> None:
    limit = 180 * 2**20
    choice = choose_sizes(small, (512, 512), memory_limit=limit, probe=False)
    assert choice.plan.host_bytes <= (1 - PLAN_HEADROOM) * limit and choice.reason  # room for the planner's error
    roomy = choose_sizes(small, (512, 512), memory_limit=2**31, probe=False)
    assert roomy.plan.chunk_size >= choice.plan.chunk_size  # more room: no smaller tiles
    with pytest.raises(ConfigError, match=r"more than the budget of 20 MiB"):
        choose_sizes(small, (512, 512), chunk_size=512, batch_size=8, memory_limit=20 * 2**20)


@pytest.mark.parametrize("left_behind_mib", [0, 64])
def test_sizes_are_chosen_again_when_planning_left_memory_behind(small: DecodeNet, monkeypatch,
                                                                 left_behind_mib: int) -> None:
    """Planning can leave RssAnon behind that the run keeps (the first fake-tensor trace); automatic sizes must
    still fit."""
    import decode_mem.footprint.choose as choose

    baseline = 200 * 2**20
    largest = choose_sizes(small, (512, 512), memory_limit=2**31, baseline_bytes=baseline, probe=False).plan
    limit = int(largest.need_bytes / (1 - PLAN_HEADROOM)) + 2**20  # the largest tiles just fit at the baseline
    readings = iter([baseline, baseline + left_behind_mib * 2**20])
    monkeypatch.setattr(choose, "rss_anon_bytes", lambda: next(readings))
    choice = choose.choose_sizes_here(small, (512, 512), memory_limit=limit, probe=False)
    assert choice.plan.baseline_bytes == baseline + left_behind_mib * 2**20
    assert choice.plan.need_bytes <= choose.with_headroom(limit)
    if left_behind_mib:
        assert "chosen again" in choice.reason and choice.plan.need_bytes < largest.need_bytes + 64 * 2**20
        assert (choice.plan.chunk_size, choice.plan.batch_size) != (largest.chunk_size, largest.batch_size)
    else:
        assert (choice.plan.chunk_size, choice.plan.batch_size) == (largest.chunk_size, largest.batch_size)


def test_auto_times_candidates_and_remembers_them(small: DecodeNet) -> None:
    first = choose_sizes(small, (64, 64), memory_limit=2**31)
    timed = [c for c in first.candidates if c["frames_per_s"] is not None]
    assert timed and "fastest of" in first.reason
    again = choose_sizes(small, (64, 64), memory_limit=2**31, probe=False)  # remembered: no timing needed
    assert again.as_dict()["chunk_size"] == first.as_dict()["chunk_size"]
    assert [c["frames_per_s"] for c in again.candidates] == [c["frames_per_s"] for c in first.candidates]


def test_smaller_tiles_with_more_halo_work_are_neither_traced_nor_timed(small: DecodeNet, monkeypatch) -> None:
    """At one batch, tiles that multiply the network work per frame cannot be the fastest: a frame that fits one
    tile is not cut into four for timing (the first run of a new user pays every trace and timing)."""
    import decode_mem.footprint.choose as choose

    timed: list[int] = []
    monkeypatch.setattr(choose, "time_unit", lambda net, plan, device: timed.append(plan.chunk_size) or 0.1)
    monkeypatch.setattr(choose, "remembered_seconds", lambda *a: None)
    choice = choose_sizes(small, (256, 256), memory_limit=2**31)
    kept = [c for c in choice.candidates if "skipped" not in c]
    skipped = [c for c in choice.candidates if "skipped" in c]
    assert {c["chunk_size"] for c in kept} == {256} and set(timed) == {256}  # one tile per frame, every batch
    assert {(c["chunk_size"], c["batch_size"]) for c in skipped} == {(128, b) for b in choose.BATCHES["cpu"]}
    work = {c: plan_inference(small, (256, 256), chunk_size=c, batch_size=1, trace=False).work_px_per_frame
            for c in (128, 256)}
    assert work[128] * (1 - choose.TIE) > work[256]  # skipped only because it is slower by more than a tie
    assert f"{work[128] / work[256]:.2f}x" in skipped[0]["skipped"]
    least = plan_inference(small, (256, 256), chunk_size=256, batch_size=1, block=choose.BLOCKS[-1], prefetch_depth=0)
    tight = choose_sizes(small, (256, 256), memory_limit=int((least.need_bytes - 2**20) / (1 - PLAN_HEADROOM)),
                         probe=False)  # no one-tile plan fits: the smaller tiles are planned after all
    assert tight.plan.chunk_size == 128 and not any("skipped" in c for c in tight.candidates)


@pytest.mark.skipif(heap._malloc_trim() is None, reason="no glibc malloc_trim here")
def test_timing_a_unit_leaves_no_freed_working_set_behind() -> None:
    """glibc kept a timed unit's freed working set in the heap, which the run that followed carried to its end;
    it is handed back after timing."""
    from decode_mem.footprint.choose import rss_anon_bytes
    from decode_mem.footprint.inference import warm_up
    from decode_mem.footprint.speed import time_unit
    from decode_mem.model.checkpoint import load_model

    net = load_model().net
    warm_up(net, CPU, "off")
    plan = plan_inference(net, (1024, 1024), chunk_size=512, batch_size=1, n_frames=4)
    before = rss_anon_bytes()
    time_unit(net, plan, CPU)
    assert rss_anon_bytes() - before < 32 * 2**20 < plan.network_bytes / 4


MEASURE = """
import json, sys, torch
torch.set_num_threads(1)
from decode_mem.io import open_stack
from decode_mem.infer import predict_stack
from decode_mem.memory import measure_phase
from decode_mem.model.checkpoint import load_model
import decode_mem.infer.runner  # noqa
model = load_model()  # the shipped model: what users run
net = model if sys.argv[4] == "openvino-int8" else model.net  # int8 calibrates on the checkpoint's physics
plans = []
with open_stack(sys.argv[1]) as stack:
    with measure_phase("run", interval=0.002, device="cpu") as phase:
        for _ in predict_stack(stack, net, chunk_size=int(sys.argv[2]), batch_size=int(sys.argv[3]),
                               on_plan=plans.append, engine=sys.argv[4]):
            pass
print(json.dumps({"peak": phase.rss_anon_peak_mb, "predicted": plans[0].plan.host_bytes / 2**20}))
"""


@pytest.mark.parametrize(("chunk", "batch", "engine"), [(128, 4, "torch"), (128, 4, "openvino"),
                                                     (128, 4, "onnxruntime"), (128, 4, "openvino-int8")])
def test_predicted_host_peak_is_close_to_the_measured_one(tmp_path: Path, chunk: int, batch: int,
                                                          engine: str) -> None:
    """Real runs in fresh processes: the measured peak RssAnon of two identical runs vs the planner's prediction
    (CPU, the default amp: bf16 on a CPU with native bf16), with torch and with each CPU runtime (``--engine``,
    int8 too, its first run quantizing the network;
    skipped where the ``cpu`` extra is not installed: its buffers are planned apart,
    ``footprint.inference.RUNTIME_WORKING_SET``). The peaks of
    identical runs differ by more than 10 % here (the same in VmHWM and in 2-ms samples), and so do their
    predictions (by 9 % in one run of the suite: the baseline read when planning holds freed heap the run then
    reuses, more in one process than in another). So each run's peak stays
    within its own plan (+20 %: at 256², chunk 256, one suite run on a 2-core Xeon planned 501 MiB in the first
    process and 415 in the second, and the second peaked at 487, 1.17x; +15 % had held before), and the
    smaller prediction is not more than 30 % above the larger peak (a plan
    may err on the safe side: here the second run peaked at 337 MiB for 415 predicted, 1.23x; the symmetric 15 %
    would fail on a CPU whose runs both peak that low, as the training test's did on CI); comparing the larger
    of each failed at random. A runtime's plan may err further on the safe side (1.45x): ``RUNTIME_WORKING_SET`` is
    fitted to fp32's buffers, and OpenVINO in bf16 at these sizes peaked at 414-509 MiB for 573-643 predicted in
    eight fresh processes on the 2-core AMX Xeon (1.25-1.38x; at 5e41f8e and 3fb30ef alike): 1.3x failed one time
    in three."""
    from decode_mem.model.engine import installed

    if not installed(engine):
        pytest.skip(f"{engine} not installed (the optional 'cpu' extra: pip install -e \".[cpu]\")")
    path = tmp_path / "s.tif"
    tifffile.imwrite(path, (100 + np.random.default_rng(0).poisson(50, (6, 512, 512))).astype(np.uint16))
    runs = []
    for _ in range(2 if engine == "torch" else 1):  # a runtime's one run: the suite's time (one is 15-50 s here)
        done = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(chunk), str(batch), engine],
                              capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert all(r["peak"] <= 1.2 * r["predicted"] for r in runs), runs
    safe_side = 1.3 if engine == "torch" else 1.45
    assert min(r["predicted"] for r in runs) <= safe_side * max(r["peak"] for r in runs), runs


def test_cli_prints_a_plan(capsys) -> None:
    assert main(["--frame", "256", "256", "--chunk_size", "128", "--batch_size", "2", "--no_probe"]) == 0
    out = capsys.readouterr().out
    assert "chunk_size 128, batch_size 2" in out and "predicted peak host RssAnon" in out


def test_cli_plans_parallel_streams(capsys) -> None:
    """``--streams 2`` plans a second block and network working set (``infer --streams``); only for inference."""
    import re

    def peak(*extra: str) -> tuple[int, str]:
        assert main(["--frame", "256", "256", "--chunk_size", "128", "--batch_size", "2", "--no_probe", *extra]) == 0
        out = capsys.readouterr().out
        return int(re.search(r"predicted peak host RssAnon: (\d+) MiB", out).group(1)), out

    one, _ = peak()
    two, out = peak("--streams", "2")
    assert "2 streams" in out and two > one
    assert main(["--train", "--frame", "64", "64", "--streams", "2"]) == 2
    assert "--streams: only for inference" in capsys.readouterr().err


def test_cli_plans_a_runtimes_working_set(capsys) -> None:
    """``--engine openvino`` plans the runtime's own buffers, as ``infer --engine openvino`` sizes its run (the
    runtime need not be installed to plan); the network's part grows, the frame blocks do not."""
    import re

    def plan(*extra: str) -> tuple[int, int, str]:
        assert main(["--frame", "256", "256", "--chunk_size", "128", "--batch_size", "2", "--no_probe", "--device",
                     "cpu", *extra]) == 0  # the CPU: the network's host bytes are printed for a CPU plan only
        out = capsys.readouterr().out
        return (int(re.search(r"frame blocks (\d+)", out).group(1)),
                int(re.search(r"network (\d+) with the allocator", out).group(1)), out)

    blocks, network, _ = plan()
    blocks_ov, network_ov, out = plan("--engine", "openvino")
    assert "engine openvino" in out and blocks_ov == blocks and network_ov > 1.5 * network
    assert main(["--train", "--frame", "64", "64", "--engine", "openvino"]) == 2
    assert "--engine: only for inference" in capsys.readouterr().err


def test_auto_streams_keep_the_sizes_of_one_stream_or_refuse(small: DecodeNet, tmp_path, monkeypatch) -> None:
    """Streams get the tiles and batch one stream would get (smaller tiles would cost more than the streams
    gain), with memory planned for all of them; where those sizes do not fit, a clear error instead. Planned from
    the trace alone: a cache of its own (a working-set ratio another test of the worker measured, e.g. 8x, made one
    stream's sizes too big for two streams in 2 GiB)."""
    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "cache" / "throughput.json"))
    one = choose_sizes(small, (512, 512), memory_limit=2**31, probe=False)
    two = choose_sizes(small, (512, 512), memory_limit=2**31, probe=False, streams=2)
    assert (two.plan.chunk_size, two.plan.batch_size) == (one.plan.chunk_size, one.plan.batch_size)
    assert two.plan.streams == 2 and two.plan.host_bytes > one.plan.host_bytes and "in 2 streams" in two.reason
    least = plan_inference(small, (512, 512), chunk_size=128, batch_size=1, block=4, prefetch_depth=0)
    limit = int((least.need_bytes + 2**16) / (1 - PLAN_HEADROOM))  # room for one stream's smallest sizes only
    assert choose_sizes(small, (512, 512), memory_limit=limit, probe=False).plan.chunk_size == 128
    with pytest.raises(ConfigError, match=r"streams 2: the sizes one stream would use \(tile core 128, batch 1\)"):
        choose_sizes(small, (512, 512), memory_limit=limit, probe=False, streams=2)


def test_the_default_host_budget_is_counted_above_the_process_baseline(small: DecodeNet, monkeypatch) -> None:
    """A process that has touched CUDA starts at ~1 GB of RssAnon (the first GPU run): with the budget counted for
    the whole process, the default refused CPU work there. The same situation at a smaller scale: the allowance is
    256 MiB and the process holds more than that before it plans (300 MB of numpy pages written, so RssAnon);
    planning and a run with the default budget are not refused, and what the run adds stays within the allowance."""
    from decode_mem.footprint import choose
    from decode_mem.infer import predict_stack

    monkeypatch.setattr(choose, "DEFAULT_HOST_ALLOWANCE", 256 * 2**20)
    ballast = np.ones(300 * 10**6 // 8, dtype=np.float64)  # written: RssAnon of this process
    try:
        choice = choose.choose_sizes_here(small, (64, 64), device=CPU, n_frames=8, probe=False)
        allowance = choose.host_allowance()
        assert choice.plan.baseline_bytes > 300 * 10**6 > allowance  # a whole-process budget would refuse this
        assert choice.budget_bytes >= 300 * 10**6 + allowance and choice.budget_kind.startswith("default host")
        assert choice.plan.need_bytes - choice.plan.baseline_bytes <= choose.with_headroom(allowance)
        frames = np.random.default_rng(0).poisson(20.0, (8, 64, 64)).astype(np.float32)
        tables = list(predict_stack(frames, small, device=CPU, batch_size=1))
        assert tables and all(set(t.columns["frame"].tolist()) <= set(range(8)) for t in tables)
        budget, kind = choose.memory_budget(CPU, None, baseline_bytes=2**30)
        assert budget == 2**30 + allowance and "baseline 1024 MiB" in kind
        # an explicit --memory_limit still caps the whole process: the ballast alone exceeds this one
        with pytest.raises(ConfigError, match="more than"):
            choose.choose_sizes_here(small, (64, 64), device=CPU, n_frames=8, probe=False, memory_limit=allowance)
    finally:
        del ballast


def test_the_headroom_is_kept_on_what_the_run_adds_not_on_the_baseline(small: DecodeNet, monkeypatch) -> None:
    """PLAN_HEADROOM covers the planner's error, which is in what the run adds: taken from the whole budget, a
    process holding 1.5 GB (the full test suite's, later a notebook's) lost 12 % of that out of its 256 MiB
    allowance and a run that fits was refused (the test above failed only in the full suite)."""
    from decode_mem.footprint import choose

    monkeypatch.setattr(choose, "DEFAULT_HOST_ALLOWANCE", 256 * 2**20)
    allowance = choose.host_allowance()
    for baseline in (0, 2**30, 4 * 2**30):
        choice = choose.choose_sizes(small, (64, 64), device=CPU, n_frames=8, probe=False, baseline_bytes=baseline)
        assert choice.budget_bytes == baseline + allowance
        assert baseline < choice.plan.need_bytes <= baseline + choose.with_headroom(allowance)
    assert choose.with_headroom(1000, 600) == 600 + int((1 - choose.PLAN_HEADROOM) * 400)
    assert choose.with_headroom(500, 600) == 600  # a baseline above the budget leaves nothing to plan for


def test_on_cuda_batches_are_timed_until_throughput_stops_growing(small: DecodeNet, monkeypatch) -> None:
    """On a GPU the batch sets the speed several-fold: a first run must time batches up the curve rather than stop
    after a share of the (short) run, as the first H200 run did at batch 2 (819 frames/s against 2622 at batch 8).
    The device's timing and trace are stand-ins here (no GPU): a measured-like curve that peaks at batch 8."""
    import time as clock

    from decode_mem.footprint import choose, inference

    curve = {1: 800.0, 2: 1400.0, 4: 2200.0, 8: 2600.0, 16: 2500.0, 32: 1800.0, 64: 1000.0}  # frames/s
    timed: list[int] = []

    def time_unit(net, plan, device):  # each timing costs 0.1 s, as a real one does
        clock.sleep(0.1)
        timed.append(plan.batch_size)
        tiles, frames = plan.unit_shape
        return (frames - 2) * tiles / plan.n_tiles / curve[plan.batch_size]

    monkeypatch.setattr(inference, "_traced_peak", lambda net, shape, config, device, run: run * 2**20)
    monkeypatch.setattr(choose, "time_unit", time_unit)
    monkeypatch.setattr(choose, "remembered_seconds", lambda *a: None)
    choice = choose.choose_sizes(small, (256, 256), chunk_size=256, device="cuda", memory_limit=2**34,
                                 n_frames=2000)
    assert timed == [1, 2, 4, 8, 16, 32]  # 16 is within the tie, 32 clearly slower: 64 is not timed
    assert choice.plan.batch_size == 8  # the fastest, and the least memory of those tied with it
