"""``infer --drift`` corrects each stack's localizations; every batch writes report.html."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from decode_mem.infer import InferConfig, run_inference
from decode_mem.infer.console import ConsoleObserver
from decode_mem.io.drift import read_drift_csv
from decode_mem.io.localizations import read_localizations
from decode_mem.simulate.config import SimulationConfig
from decode_mem.simulate.stack import simulate_stack

DRIFT_NM = 10.0  # nm rms: the shipped model on these 300 frames of 64² px gave 3.5 nm (tests/drift: 5 nm bar)


def _rmse(estimate: np.ndarray, truth: np.ndarray) -> float:
    """x and y together, each curve's mean removed (tests/drift/test_drift.py's measure)."""
    err = (estimate - estimate.mean(0)) - (truth - truth.mean(0))
    return float(np.sqrt(np.mean(np.sum(err**2, axis=1))))


def test_drift_flag_writes_corrected_files_and_the_report_shows_them(shipped_model: Path, tmp_path: Path) -> None:
    sim = SimulationConfig(frame_size=(64, 64), structure={"kind": "rings", "off_time": 30.0, "density": 2.0},
                           drift_nm=150.0, drift_frames=300)
    stack = tmp_path / "pores.tif"
    simulate_stack(sim, 300, stack, tmp_path / "pores_gt.csv", seed=2)  # + pores_gt_drift.csv, the true drift
    dark = tmp_path / "dark.tif"  # background and camera noise only: too few localizations for a drift
    simulate_stack(SimulationConfig(frame_size=(64, 64), density=0.0), 20, dark, seed=3)
    out = tmp_path / "out"
    cfg = InferConfig(inputs=(str(stack), str(dark)), out=str(out), model=str(shipped_model), drift=True)
    report = run_inference(cfg, ConsoleObserver(quiet=True), command="python -m decode_mem.infer ... --drift")
    assert not report.failures
    summary = json.loads((out / "pores.json").read_text())
    assert summary["drift"]["segments"] >= 4
    assert {"pores_undrift.csv", "pores_drift.csv", "pores_drift.png"} <= set(summary["outputs"])
    frames, dxdy = read_drift_csv(out / "pores_drift.csv")
    true_frames, truth = read_drift_csv(tmp_path / "pores_gt_drift.csv")
    assert len(frames) == 300 and np.array_equal(frames, true_frames)
    assert np.ptp(truth, axis=0).max() > 100  # a real drift to find (150 nm asked for)
    # the localizer's drift is the true one (offsets removed: a drift estimate's is arbitrary) to within DRIFT_NM,
    # where leaving the drift uncorrected is off by several times that
    assert _rmse(dxdy, truth) < DRIFT_NM < _rmse(np.zeros_like(truth), truth) / 3, _rmse(dxdy, truth)
    raw, fixed = read_localizations(out / "pores.csv", pixel_size=100.0), read_localizations(
        out / "pores_undrift.csv", pixel_size=100.0)
    assert len(raw) == len(fixed) == summary["localizations"]
    # each localization moved by its frame's drift (the CSV's rows in the same order)
    np.testing.assert_array_equal(fixed["frame"], raw["frame"])
    shift = dxdy[np.searchsorted(frames, raw["frame"])] / 100.0  # px
    np.testing.assert_allclose(raw["x"] - fixed["x"], shift[:, 0], atol=1e-3)
    np.testing.assert_allclose(raw["y"] - fixed["y"], shift[:, 1], atol=1e-3)
    dark_summary = json.loads((out / "dark.json").read_text())
    assert "drift" not in dark_summary and "drift_warning" in dark_summary
    html = (out / "report.html").read_text()
    for needle in ("pores.tif", "dark.tif", "--drift", "estimated drift of pores", "data:image/png;base64"):
        assert needle in html, needle
    assert html.count("data:image/png;base64") >= 3  # images, drift and memory figures
