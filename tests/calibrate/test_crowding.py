"""The pixels' cumulants with the PSF give the density, photons and background where spots cannot be counted."""

from __future__ import annotations

import functools
import math

import pytest

from decode_mem.calibrate import calibrate_movie
from decode_mem.calibrate.crowding import CrowdedPhysics, crowded_estimates, crowded_physics
from decode_mem.calibrate.match import LEVEL_BAND, simulation_from_estimates
from decode_mem.io.camera import Camera
from decode_mem.simulate import SimulationConfig, simulate_movie

Z_RANGE = (-400.0, 400.0)
FLUX_MEAN, FLUX_REL, BG = 5000.0, 0.3, 50.0


@functools.cache
def movie(density: float, psf: str = "pupil"):
    """100 frames of 64² px: bright 3-D spots of the aberrated astigmatic quick-start PSF, as ``bench_3d``."""
    params = {"frame_size": [64, 64], "density": density, "photons_mean": FLUX_MEAN,
              "photons_std": FLUX_REL * FLUX_MEAN, "bg": BG, "on_time": 2.0, "z_range": list(Z_RANGE),
              "camera": "emccd", "margin": 6.0, "psf": psf,
              "pupil": {"astigmatism": 0.1, "spherical": 0.04, "coma": 0.02}}
    cfg = SimulationConfig.from_dict(params)
    adu, gt, _ = simulate_movie(cfg, 100, seed=5)
    area = 64 * 64 * (cfg.camera.pixel_size / 1000) ** 2
    return adu, cfg, len(gt["photons"]) / 100 / area


@pytest.mark.parametrize("density", [0.3, 2.0])
def test_density_photons_and_background_come_from_the_pixels_where_spots_cannot_be_counted(density: float) -> None:
    adu, cfg, true_density = movie(density)
    cal = calibrate_movie(adu, cfg.camera, frames=100)
    estimates = {k: e.value for k, e in cal.estimates.items()}
    physics = crowded_physics(estimates, cfg.camera.pixel_size, cfg.spline_psf(), Z_RANGE)
    assert physics is not None
    median_flux = FLUX_MEAN * math.exp(-math.log1p(FLUX_REL**2) / 2)
    assert physics.density_per_um2 == pytest.approx(true_density, rel=0.25)
    assert physics.flux_median == pytest.approx(median_flux, rel=0.25)
    assert physics.background_photons == pytest.approx(BG, rel=0.1)
    # what Gaussian fits of the spots gave: a part of their light; at 2 /µm² far fewer emitters, and the light
    # between them as background
    if density == 0.3:
        assert estimates["flux_median"] < 0.5 * median_flux
    else:
        assert estimates["density_per_um2"] < 0.5 * true_density and estimates["background_photons"] > 1.3 * BG


def test_a_movie_without_emitters_has_no_light_beyond_the_noise() -> None:
    cfg = SimulationConfig.from_dict({"frame_size": [64, 64], "density": 0.0, "bg": BG, "camera": "emccd"})
    adu = simulate_movie(cfg, 60, seed=1)[0]
    estimates = {k: e.value for k, e in calibrate_movie(adu, cfg.camera, frames=60).estimates.items()}
    qe = cfg.camera.qe
    assert abs(estimates["emitter_light_variance"]) < 0.03 * 2 / qe * BG  # of the EMCCD's noise variance ...
    assert abs(estimates["emitter_light_third"]) < 0.1 * 6 / qe**2 * BG  # ... and third cumulant


def test_the_matched_bands_bracket_both_estimates() -> None:
    physics = CrowdedPhysics(density_per_um2=2.0, flux_median=4800.0, photons_mean=3300.0, background_photons=45.0,
                             inputs={})
    calibrated = {"density_per_um2": 0.05, "flux_median": 2500.0, "background_photons": 100.0, "psf_sigma_px": 1.5}
    matched = crowded_estimates(calibrated, physics)
    assert matched["density_per_um2"] == 2.0 and matched["flux_median"] == 4800.0
    section = simulation_from_estimates(matched, Camera.emccd())
    lo, hi = section["density_range"]
    assert lo <= 2.0 / 1.5 and hi >= 3 * 2.0
    assert section["bg"] == pytest.approx([45.0 / LEVEL_BAND, 100.0 * LEVEL_BAND], rel=1e-4)
    assert crowded_estimates(calibrated, None) == calibrated
    counted = crowded_estimates({**calibrated, "density_per_um2": 3.0}, physics)
    assert counted["density_per_um2"] == 3.0  # a detected density above it stands (it is a lower bound)
