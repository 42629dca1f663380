"""``python -m decode_mem.fit`` end to end in a CI-size form: calibrate -> decide -> fine-tune within a budget ->
validate both models on held-out matched windows -> localize; and the decision without training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tifffile

from decode_mem.fit.__main__ import main
from decode_mem.simulate import SimulationConfig, simulate_movie


@pytest.fixture(scope="module")
def movie(tmp_path_factory) -> Path:
    cfg = SimulationConfig.from_dict({"frame_size": [64, 64], "density": 0.6, "psf_sigma": 1.5, "bg": 40.0,
                                      "photons_mean": 3000.0, "photons_std": 900.0, "camera": "scmos",
                                      "margin": 6.0})
    adu, _, _ = simulate_movie(cfg, 60, seed=21)
    path = tmp_path_factory.mktemp("movie") / "cells.tif"
    tifffile.imwrite(path, adu)
    return path


def test_fit_fine_tunes_within_the_budget_validates_and_localizes(movie: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "fit"
    rc = main([str(movie), "--out", str(out), "--camera", "scmos", "--budget", "0.05", "--train", "always",
               "--calib_frames", "40", "--val_windows", "16", "--chunk_size", "64", "--batch_size", "2",
               "--threads", "1"])
    assert rc == 0, capsys.readouterr().err
    report = json.loads((out / "fit.json").read_text())
    assert report["train_steps"] >= 1 and 0 < report["train_minutes"] < 2
    assert set(report["validation"]) == {"fine-tuned", "base"}
    for scores in report["validation"].values():
        assert 0 <= scores["jaccard"] <= 1
    assert report["model"].endswith("model.pt") or "default_2d" in report["model"]
    for name in ("calib.yaml", "calib.png", "model.pt", "model.md", "cells.csv", "cells.json"):
        assert (out / name).is_file(), name
    assert (out / "training" / "checkpoint.pt").is_file()  # a later run with the same --out continues from it
    printed = capsys.readouterr().out
    assert "held-out matched windows, fine-tuned" in printed and "calibrated" in printed


def test_fit_never_uses_the_base_model_as_it_is(movie: Path, tmp_path: Path) -> None:
    out = tmp_path / "never"
    assert main([str(movie), "--out", str(out), "--camera", "scmos", "--train", "never", "--calib_frames", "40",
                 "--chunk_size", "64", "--batch_size", "2", "--quiet"]) == 0
    report = json.loads((out / "fit.json").read_text())
    assert report["decision"].startswith("base model") and report["train_steps"] == 0
    assert not (out / "training").exists() and (out / "cells.csv").is_file()
