"""``fit MOVIE --psf psf.h5`` with a PSF that changes across the field: nothing new to type; the model records the
field and its PSF, infer reads each tile's place; a movie of another frame size is refused in one line."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile

from decode_mem.fit.__main__ import main
from decode_mem.model.checkpoint import load_model
from decode_mem.simulate import SimulationConfig, simulate_movie

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "psf"))
from psf_helpers import grid_field_psf

FIELD = (96, 112)


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("fitfield")
    psf = root / "field.h5"
    grid_field_psf(psf, FIELD, np.arange(-700.0, 701.0, 50.0), 12, [0.0, 50.0, 111.0], [0.0, 45.0, 95.0], 60.0,
                   (-500.0, 500.0), (-600.0, 600.0))
    cfg = SimulationConfig.from_dict({"frame_size": list(FIELD), "density": 0.5, "psf": "spline", "psf_file": str(psf),
                                      "z_range": [-400.0, 400.0], "bg": 40.0, "photons_mean": 4000.0,
                                      "photons_std": 1000.0, "camera": "emccd", "margin": 6.0})
    adu, _, _ = simulate_movie(cfg, 12, seed=3)
    movie = root / "field_movie.tif"
    tifffile.imwrite(movie, adu)
    tifffile.imwrite(root / "small.tif", adu[:, :64, :64])
    return movie, psf


def test_a_movie_of_another_frame_size_is_refused_in_one_line(setup, tmp_path: Path, capsys) -> None:
    movie, psf = setup
    out = tmp_path / "fit"
    assert main([str(movie.parent / "small.tif"), "--out", str(out), "--camera", "emccd", "--psf", str(psf)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "64x64 px" in err and "96x112 px field" in err
    assert not out.exists()


@pytest.mark.slow  # ~1-2 min on 2 busy cores: a few steps of the default 3-D network, validated, localizing
def test_fit_with_a_field_psf_trains_a_model_that_knows_the_field(setup, tmp_path: Path, capsys) -> None:
    movie, psf = setup
    out = tmp_path / "fit"
    rc = main([str(movie), "--out", str(out), "--camera", "emccd", "--psf", str(psf), "--budget_minutes", "0.05",
               "--calib_frames", "12", "--val_windows", "8", "--chunk_size", "48", "--batch_size", "2",
               "--threads", "1"])
    assert rc == 0, capsys.readouterr().err
    model = load_model(out / "model.pt")
    assert model.net.config.field_shape == FIELD and model.net.config.input_channels == 5
    assert model.psf_field is not None and model.psf_field.field_shape == FIELD
    assert np.allclose(model.psf_field.bead_shift, np.linspace(-60, 60, 9))
    assert (out / "field_movie.csv").exists()  # localized through the tiled executor with the tiles' places
