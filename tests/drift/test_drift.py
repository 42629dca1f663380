"""Drift correction: accuracy on simulated structures with a known stage drift, file round trips, the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from decode_mem.drift import DriftConfig, correct_file, corrected_path, estimate_drift
from decode_mem.drift.__main__ import main
from decode_mem.errors import ConfigError, StackError
from decode_mem.io.drift import read_drift_csv
from decode_mem.io.localizations import read_localizations, write_localizations
from decode_mem.io.table import EmitterTable

N_FRAMES = 1000
NOISE_NM = 10.0


def drifting_structure(kind: str, drift_nm: float, seed: int = 3) -> tuple[EmitterTable, np.ndarray, float]:
    """Ground truth of a structure of repeatedly blinking sites under a smooth stage drift, with ~10 nm
    localization noise added: ``(table in px, true drift (N_FRAMES, 2) nm, pixel size nm)``."""
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.movie import MovieSimulator

    cfg = SimulationConfig(frame_size=(96, 96), structure={"kind": kind, "off_time": 50.0, "density": 1.5},
                           drift_nm=drift_nm, drift_frames=N_FRAMES)
    sim = MovieSimulator(cfg, seed=seed)
    gt = EmitterTable.concat(b.gt for b in sim.blocks(N_FRAMES, 250))
    px = sim.camera.pixel_size
    rng = np.random.default_rng(seed)
    noisy = {c: (gt[c] + rng.normal(0.0, NOISE_NM / px, len(gt))).astype(np.float32) for c in ("x", "y")}
    return EmitterTable({**gt.columns, **noisy}), sim.drift_nm(0, N_FRAMES), px


def rmse(estimate: np.ndarray, truth: np.ndarray) -> float:
    """x and y together, each curve's mean removed (the offset of a drift estimate is arbitrary)."""
    err = (estimate - estimate.mean(0)) - (truth - truth.mean(0))
    return float(np.sqrt(np.mean(np.sum(err**2, axis=1))))


@pytest.fixture(scope="module")
def rings() -> tuple[EmitterTable, np.ndarray, float]:
    return drifting_structure("rings", drift_nm=100.0)


@pytest.mark.parametrize("method", ["loo", "rcc"])
def test_estimate_is_within_5_nm_of_a_known_drift(rings, method: str) -> None:
    table, truth, px = rings
    assert np.ptp(truth, axis=0).max() > 80  # a real ~100 nm drift to find
    est = estimate_drift(table["frame"], table["x"] * px, table["y"] * px, DriftConfig(method=method),
                         n_frames=N_FRAMES)
    assert est.dxdy.shape == (N_FRAMES, 2) and np.allclose(est.dxdy[0], 0.0)
    assert rmse(est.dxdy, truth) < 5.0
    assert rmse(np.zeros_like(truth), truth) > 20.0  # not correcting at all would fail the bar


def test_a_drift_of_several_hundred_nm_is_caught_by_the_coarse_pass() -> None:
    table, truth, px = drifting_structure("grids", drift_nm=400.0, seed=5)
    est = estimate_drift(table["frame"], table["x"] * px, table["y"] * px, n_frames=N_FRAMES)
    assert np.ptp(truth, axis=0).max() > 300
    assert rmse(est.dxdy, truth) < 5.0


@pytest.mark.parametrize("suffix", [".csv", ".hdf5", ".parquet"])
def test_corrected_file_round_trips_in_the_input_format(rings, tmp_path: Path, suffix: str) -> None:
    table, truth, px = rings
    src = tmp_path / f"locs{suffix}"
    meta = {} if suffix == ".csv" else {"width": 96, "height": 96}
    write_localizations(table, src, pixel_size=px, **meta)
    res = correct_file(src, tmp_path / "out", pixel_size=px)
    assert res.corrected == corrected_path(src, tmp_path / "out") and res.corrected.suffix == suffix
    assert res.localizations == len(table)
    frames, dxdy = read_drift_csv(res.table)
    assert np.array_equal(frames, res.estimate.frames)
    np.testing.assert_allclose(dxdy, res.estimate.dxdy, atol=1e-3)  # 4 decimals in the table
    back = read_localizations(res.corrected, pixel_size=px)
    before = read_localizations(src, pixel_size=px)
    assert np.array_equal(back["frame"], before["frame"])
    d = res.estimate.at(before["frame"]) / px
    np.testing.assert_allclose(back["x"], before["x"] - d[:, 0], atol=2e-3)
    np.testing.assert_allclose(back["y"], before["y"] - d[:, 1], atol=2e-3)
    np.testing.assert_allclose(back["photons"], before["photons"], rtol=1e-4)
    assert res.plot.stat().st_size > 5000 and res.plot.read_bytes()[:4] == b"\x89PNG"
    assert rmse(res.estimate.dxdy, truth) < 5.0


def test_cli_writes_three_files_and_bad_input_writes_none(rings, tmp_path: Path, capsys) -> None:
    table, _, px = rings
    src = tmp_path / "movie.csv"
    write_localizations(table, src, pixel_size=px)
    assert main([str(src), "--out", str(tmp_path / "out"), "--method", "rcc", "--quiet"]) == 0
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["movie_drift.csv", "movie_drift.png", "movie_undrift.csv"]
    bad = tmp_path / "bad.csv"
    bad.write_text("hello,world\n1,2\n")
    capsys.readouterr()
    assert main([str(bad), "--out", str(tmp_path / "bad_out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.csv" in err[0]
    assert not (tmp_path / "bad_out").exists() or not any((tmp_path / "bad_out").iterdir())


def test_too_few_localizations_and_bad_settings_are_refused() -> None:
    with pytest.raises(StackError, match="too few"):
        estimate_drift(np.arange(10), np.zeros(10), np.zeros(10))
    with pytest.raises(ConfigError, match="method"):
        DriftConfig(method="aim")
    with pytest.raises(ConfigError, match="segments"):
        DriftConfig(segments=1)


@pytest.mark.parametrize("method", ["loo", "rcc"])
def test_localizations_with_no_repeated_structure_give_no_drift(method: str) -> None:
    """Emitters each seen once, scattered uniformly: no time segment shares structure with another, so a 'drift'
    would be the correlation noise (hundreds of nm): refused in one line, not returned as a correction."""
    rng = np.random.default_rng(0)
    n = 40_000
    frame = np.sort(rng.integers(0, N_FRAMES, n))
    with pytest.raises(StackError, match=r"drift: the time segments share no structure to register"):
        estimate_drift(frame, rng.uniform(0, 9600, n), rng.uniform(0, 9600, n), DriftConfig(method=method),
                       n_frames=N_FRAMES)
