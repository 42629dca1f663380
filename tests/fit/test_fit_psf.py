"""``fit MOVIE --psf psf.h5``: a 3-D movie gets a 3-D model trained on the user's PSF within the budget."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile

from decode_mem.fit.__main__ import main
from decode_mem.io.psf_file import write_psf
from decode_mem.model.checkpoint import load_checkpoint
from decode_mem.psf import spline_from_volume
from decode_mem.simulate import SimulationConfig, simulate_movie

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "psf"))
from psf_helpers import analytic_patches, analytic_volume


def _analytic_psf_sums(z0: float, z1: float, n: int = 4000) -> tuple[float, float]:
    """Σh² and Σh³ of the unit-flux analytic PSF (the one the test's spline is made from), averaged over z uniform
    in [z0, z1] and uniform sub-pixel positions."""
    rng = np.random.default_rng(0)
    z = rng.uniform(z0, z1, n)
    x, y = (20.0 + rng.uniform(-0.5, 0.5, n) for _ in range(2))
    h = analytic_patches(x, y, z, 25)
    return float((h**2).sum((1, 2)).mean()), float((h**3).sum((1, 2)).mean())


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("fit3d")
    z = np.arange(-700.0, 701.0, 50.0)
    spline = spline_from_volume(analytic_volume(z, 20, 2), dz=50.0, z0=14.0, upsample=2, z_range=(-600.0, 600.0),
                                pixel_size=100.0)
    psf = root / "psf.h5"
    write_psf(psf, spline)
    cfg = SimulationConfig.from_dict({"frame_size": [48, 48], "density": 0.5, "psf": "spline", "psf_file": str(psf),
                                      "z_range": [-500.0, 500.0], "bg": 40.0, "photons_mean": 4000.0,
                                      "photons_std": 1000.0, "camera": "emccd", "margin": 6.0})
    adu, _, _ = simulate_movie(cfg, 40, seed=3)
    movie = root / "beads3d.tif"
    tifffile.imwrite(movie, adu)
    return movie, psf


@pytest.mark.slow  # ~50 s on 2 busy cores: the default-size 3-D network trains, is scored, validated and localizes
def test_fit_with_a_psf_trains_a_3d_model_and_writes_z(setup, tmp_path: Path, capsys) -> None:
    movie, psf = setup
    out = tmp_path / "fit"
    rc = main([str(movie), "--out", str(out), "--camera", "emccd", "--psf", str(psf), "--budget_minutes", "0.05",
               "--calib_frames", "40", "--val_windows", "8", "--chunk_size", "48", "--batch_size", "2",
               "--threads", "1"])
    assert rc == 0, capsys.readouterr().err
    report = json.loads((out / "fit.json").read_text())
    assert report["decision"] == "3-D model trained from scratch" and report["train_steps"] >= 1
    assert set(report["validation"]) == {"3-D model"} and "rmse_ax" in report["validation"]["3-D model"]
    physics = report["pixel_statistics"]  # the density, photons and background the pixels' cumulants gave
    # the movie's truth (density 0.5 per µm², background 40 photons/px) within the 0.7-1.5x that
    # benchmarks/results/crowding.md measured for the cumulant estimates on 12 movies: cumulants fed twice the
    # photons (a gain off by 2x) gave a background of 74 (37.96 right)
    assert 0.7 * 0.5 <= physics["density_per_um2"] <= 1.5 * 0.5, physics
    assert 0.7 * 40.0 <= physics["background_photons"] <= 1.5 * 40.0, physics
    # the PSF's sums behind them are over the PSF file's whole z range (-600..600 nm), as the analytic PSF gives
    # them (psf_helpers, sub-pixel positions drawn): the in-focus PSF alone gives 1.28x / 1.54x and the movie's
    # -500..500 nm 1.09x / 1.14x; the density alone cannot tell (the in-focus sums moved it 0.655 -> 0.74)
    h2, h3 = _analytic_psf_sums(-600.0, 600.0)
    assert physics["psf_sum_h2"] == pytest.approx(h2, rel=0.05) and physics["psf_sum_h3"] == pytest.approx(h3, rel=0.05)
    state = load_checkpoint(out / "model.pt")
    assert state["model_config"]["use_z"] and state["meta"]["simulation"]["psf"] == "spline"
    assert state["meta"]["envelope"]["z_range_nm"] == [-600.0, 600.0]  # the PSF file's valid range
    low, high = state["meta"]["simulation"]["density_range"]
    assert low <= physics["density_per_um2"] <= high  # trained on the density the pixels gave
    header = (out / "beads3d.csv").read_text().splitlines()[0]
    assert '"z [nm]"' in header


def test_fit_psf_errors_before_any_work(setup, tmp_path: Path, capsys) -> None:
    movie, _ = setup
    assert main([str(movie), "--out", str(tmp_path / "o"), "--psf", str(tmp_path / "none.h5")]) == 2
    assert "none.h5: PSF file not found" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
