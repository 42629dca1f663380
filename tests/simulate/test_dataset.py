"""The on-the-fly training dataset: the sample contract, determinism, workers, ground truth vs frames."""

from __future__ import annotations

import warnings

import pytest
import torch
from fresh_process import run_check
from torch.utils.data import DataLoader

from decode_mem.simulate import SimulatedDataset, SimulationConfig, simulate_batch, simulate_samples, simulate_windows
from decode_mem.simulate.psf import render_emitters

CFG = SimulationConfig(frame_size=(24, 32), density=2.0)


def test_sample_contract() -> None:
    s = SimulatedDataset(CFG, seed=0).sample(0)
    k = CFG.k_max
    assert set(s) == {"frames", "em", "mask", "bg", "read_var"}
    assert s["frames"].shape == (3, 24, 32) and s["frames"].dtype == torch.float32
    assert s["em"].shape == (k, 4) and s["em"].dtype == torch.float32
    assert s["mask"].shape == (k,) and s["mask"].dtype == torch.bool
    assert s["bg"].shape == (24, 32) and s["bg"].dtype == torch.float32
    n = int(s["mask"].sum())
    assert n > 0 and torch.all(s["em"][n:] == 0) and torch.all(s["mask"][:n])  # real rows first, zero padding
    x, y, z, photons = s["em"][:n].T
    assert torch.all((x >= -0.5) & (x < 31.5) & (y >= -0.5) & (y < 23.5))
    assert torch.all(z == 0) and torch.all(photons > 0)
    assert torch.all(photons[:-1] >= photons[1:])  # brightest first


def test_batch_contract_and_collate_agree() -> None:
    b = simulate_batch(CFG, 5, torch.Generator().manual_seed(0))
    assert b["frames"].shape == (5, 3, 24, 32) and b["em"].shape == (5, CFG.k_max, 4)
    assert b["mask"].shape == (5, CFG.k_max) and b["bg"].shape == (5, 24, 32)
    loaded = next(iter(DataLoader(SimulatedDataset(CFG, seed=0), batch_size=5)))
    assert {k: v.shape for k, v in loaded.items()} == {k: v.shape for k, v in b.items()}


def test_same_seed_same_samples_different_seed_different() -> None:
    a = SimulatedDataset(CFG, seed=3).sample(7)
    b = SimulatedDataset(CFG, seed=3).sample(7)
    c = SimulatedDataset(CFG, seed=4).sample(7)
    d = SimulatedDataset(CFG, seed=3).sample(8)
    for key in a:
        assert torch.equal(a[key], b[key])
    assert not torch.equal(a["frames"], c["frames"])
    assert not torch.equal(a["frames"], d["frames"])


def test_iteration_is_deterministic_and_epochs_differ() -> None:
    ds = SimulatedDataset(CFG, seed=1, length=4)
    first = [s["frames"] for s in ds]
    again = [s["frames"] for s in ds]
    assert len(first) == len(ds) == 4
    assert all(torch.equal(p, q) for p, q in zip(first, again, strict=True))
    ds.set_epoch(1)
    other = [s["frames"] for s in ds]
    assert not any(torch.equal(p, q) for p, q in zip(first, other, strict=True))


def test_workers_yield_disjoint_samples_equal_to_the_single_process_ones() -> None:
    run_check(__file__, "_check_workers_yield_disjoint_samples")  # a process of its own: tests/fresh_process.py


def _check_workers_yield_disjoint_samples() -> None:
    ds = SimulatedDataset(CFG, seed=2, length=6)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    got = [s["frames"] for s in loader]
    want = [ds.sample(i)["frames"] for i in range(6)]
    assert len(got) == 6
    # every sample exactly once, whatever order the workers interleave in
    for w in want:
        assert sum(torch.equal(w, g) for g in got) == 1


def test_ground_truth_rows_reproduce_the_noise_free_frames() -> None:
    cfg = SimulationConfig(frame_size=(20, 28), density=3.0, margin=0.0, psf="astig3d")
    wb = simulate_windows(cfg, 3, torch.Generator().manual_seed(5))
    # the middle frames from the padded emitter lists alone
    canvas = torch.zeros((3, 20, 28))
    b, k = torch.nonzero(wb.mask, as_tuple=True)
    em = wb.em[b, k]
    render_emitters(cfg, canvas, b, em[:, 0], em[:, 1], em[:, 2], em[:, 3])
    torch.testing.assert_close(canvas + wb.bg, wb.expected[:, 1], rtol=1e-5, atol=1e-2)
    # the network input is the noisy counts in photons, centred on the noise-free frames
    torch.testing.assert_close(wb.frames, cfg.camera.to_photons(wb.adu))
    assert float((wb.frames - wb.expected).mean()) == pytest.approx(0.0, abs=2.0)


def test_too_many_emitters_warns_and_keeps_the_brightest() -> None:
    cfg = SimulationConfig(frame_size=(24, 24), density=10.0, max_emitters=4, margin=0.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wb = simulate_windows(cfg, 2, torch.Generator().manual_seed(6))
    assert any("max_emitters=4" in str(w.message) for w in caught)
    assert wb.em.shape == (2, 4, 4) and bool(wb.mask.all())
    mid = wb.rows.select(torch.nonzero(wb.rows.frame == 1).squeeze(1))
    brightest = torch.sort(mid.photons[mid.movie == 0], descending=True).values[:4]
    torch.testing.assert_close(wb.em[0, :, 3], brightest)


def test_validation_set_is_the_first_samples() -> None:
    val = simulate_samples(CFG, 3, seed=9)
    assert val["frames"].shape == (3, 3, 24, 32)
    assert torch.equal(val["em"][2], SimulatedDataset(CFG, seed=9).sample(2)["em"])


def test_no_emitters_is_fine() -> None:
    s = SimulatedDataset(SimulationConfig(frame_size=(8, 8), density=0.0), seed=0).sample(0)
    assert not bool(s["mask"].any()) and s["frames"].shape == (3, 8, 8)


@pytest.mark.gpu
def test_cuda_batch_matches_the_contract() -> None:
    b = simulate_batch(CFG, 4, torch.Generator(device="cuda").manual_seed(0))
    assert all(v.device.type == "cuda" for v in b.values())
    assert b["frames"].shape == (4, 3, 24, 32) and b["em"].shape == (4, CFG.k_max, 4)
    s = SimulatedDataset(CFG, seed=0, device="cuda").sample(0)
    assert s["frames"].is_cuda


def test_dataset_pickles_small_for_spawned_workers() -> None:
    import pickle

    ds = SimulatedDataset(CFG, seed=2, length=10)
    blob = pickle.dumps(ds)
    assert len(blob) < 4096  # config + a few integers: nothing per sample
    assert torch.equal(pickle.loads(blob).sample(3)["frames"], ds.sample(3)["frames"])
