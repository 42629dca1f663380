"""The domain check of a model whose PSF changes across the field: each place's spots against the PSF there, and
a warning that says where they differ."""

from __future__ import annotations

import numpy as np
import pytest

from decode_mem.calibrate.field_shape import check_field_shape, field_warnings, region_windows
from decode_mem.infer.domain import ModelPsf, check_domain
from decode_mem.io.camera import Camera
from decode_mem.io.field_psf_file import FieldPsfData, write_field_psf
from decode_mem.simulate import SimulationConfig, simulate_movie
from decode_mem.simulate.config import PupilConfig, file_field
from decode_mem.simulate.field_spline import FieldSplinePSF
from decode_mem.simulate.pupil import pupil_volume

FIELD = (384, 384)
Z = np.arange(-700.0, 701.0, 50.0)
Z_RANGE = (-400.0, 400.0)
CENTRE = {"astigmatism": 0.1, "spherical": 0.04}


def _field_psf(path, corner_astigmatism: float) -> str:
    """A field PSF whose astigmatism grows from the centre's to ``corner_astigmatism`` at the corners (9 beads)."""
    mean = pupil_volume(PupilConfig(**CENTRE), Z, 100.0, 8)
    corner = pupil_volume(PupilConfig(**{**CENTRE, "astigmatism": corner_astigmatism}), Z, 100.0, 8)
    g = np.array([0.0, (FIELD[1] - 1) / 2, FIELD[1] - 1])
    gx, gy = np.meshgrid(g, g)
    r2 = (((gx / (FIELD[1] - 1)) * 2 - 1) ** 2 + ((gy / (FIELD[0] - 1)) * 2 - 1) ** 2) / 2
    data = FieldPsfData(field_shape=FIELD, mean=mean, components=(corner - mean)[None], bead_xy=np.column_stack(
        [gx.ravel(), gy.ravel()]), bead_weights=r2.ravel()[:, None], bead_shift=np.zeros(9), x0=16.0, y0=16.0,
        z0=float(-Z[0] / 50.0), dz=50.0, upsample=2, z_range=(-600.0, 600.0), shape_range=(-600.0, 600.0),
        pixel_size=100.0)
    write_field_psf(path, FieldSplinePSF(data).data, data)
    return str(path)


def _round_corners(path) -> str:
    """A field PSF like the centre's except in the corner squares, where it is a round 2-D Gaussian (σ 1.6 px at
    every z): wider than any astigmatic PSF of the model there (25 beads, those in the corner squares round)."""
    mean = pupil_volume(PupilConfig(**CENTRE), Z, 100.0, 8)
    off = (np.arange(mean.shape[1]) - mean.shape[1] // 2) / 2
    gauss = np.exp(-0.5 * (off / 1.6) ** 2)
    flat = np.broadcast_to(np.outer(gauss, gauss) / np.outer(gauss, gauss)[::2, ::2].sum(), mean.shape)
    g = np.linspace(0, FIELD[1] - 1, 5)
    gx, gy = np.meshgrid(g, g)
    corner = ((gx < 128) | (gx > FIELD[1] - 129)) & ((gy < 128) | (gy > FIELD[0] - 129))
    data = FieldPsfData(field_shape=FIELD, mean=mean, components=(flat - mean)[None], bead_xy=np.column_stack(
        [gx.ravel(), gy.ravel()]), bead_weights=corner.ravel().astype(float)[:, None], bead_shift=np.zeros(25),
        x0=16.0, y0=16.0, z0=float(-Z[0] / 50.0), dz=50.0, upsample=2, z_range=(-600.0, 600.0),
        shape_range=(-600.0, 600.0), pixel_size=100.0)
    write_field_psf(path, FieldSplinePSF(data).data, data)
    return str(path)


def _movie(psf_file: str, seed: int) -> np.ndarray:
    cfg = SimulationConfig.from_dict({"frame_size": list(FIELD), "psf": "spline", "psf_file": psf_file,
                                      "z_range": list(Z_RANGE), "density": 0.3, "photons_mean": 8000.0,
                                      "photons_std": 1000.0, "bg": 30.0, "camera": "emccd"})
    return simulate_movie(cfg, 10, seed=seed)[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("field")
    return {"model": _field_psf(folder / "model.h5", 0.3), "other": _round_corners(folder / "other.h5")}


def test_squares_are_the_centre_and_the_corners() -> None:
    w = region_windows((300, 600))
    assert w["centre"] == (slice(100, 200), slice(250, 350))  # a third of the field where that is less than 128
    assert w["bottom-right corner"] == (slice(200, 300), slice(500, 600))
    assert region_windows((90, 90))["top-left corner"] == (slice(0, 30), slice(0, 30))


def test_spots_of_the_models_own_field_psf_match_everywhere_and_another_is_found_at_the_corners(files) -> None:
    psf = file_field(files["model"])
    own = check_field_shape(_movie(files["model"], 1), Camera.emccd(), psf, Z_RANGE, 10)
    assert not field_warnings(own), {k: v if isinstance(v, dict) else v.as_dict() for k, v in own.items()}
    assert all(not isinstance(v, dict) and v.judged for v in own.values())
    # a movie whose corners' spots are round and wide: not the model's PSF there; the centre's are
    other = check_field_shape(_movie(files["other"], 2), Camera.emccd(), psf, Z_RANGE, 10)
    lines = field_warnings(other)
    assert lines and all("corner" in line for line in lines) and len(lines) >= 3
    assert not isinstance(other["centre"], dict) and other["centre"].ok
    # through the domain check: one line per place that is off, the fix to calibrate beads
    check = check_domain(_movie(files["other"], 2), Camera.emccd(), {}, psf=ModelPsf(psf, Z_RANGE))
    assert check.psf_mismatch and any("corner's spots against the model's PSF there" in w for w in check.warnings)
    assert "decode_mem.psf" in check.message("movie.tif")
