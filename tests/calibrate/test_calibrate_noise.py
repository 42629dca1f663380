"""The camera noise is measured without the light of emitters that no spot mask catches (``calibrate.noise``)."""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import pytest
from calibrate_helpers import config
from scipy import ndimage

from decode_mem.calibrate import calibrate_movie
from decode_mem.calibrate.background import QuietStats
from decode_mem.calibrate.noise import SpatialNoiseStats, choose, excess_ratio
from decode_mem.simulate import simulate_movie

SLOPE, READ = 2.0, 4.0  # photons² per photon (EMCCD at qe 1) and photons² of read noise


@functools.cache
def dense(sigma: float, density: float):
    """10 frames of bright (5000-photon) spots on 50 photons/px: spots' tails cover most of the frame."""
    cfg = config(sigma, 50.0, density=density, photons_mean=5000.0, photons_std=1500.0)
    return simulate_movie(cfg, 10, seed=3)[0], cfg


@pytest.mark.parametrize(("sigma", "density"), [(2.0, 2.0), (1.5, 3.0)])
def test_a_dense_bright_movie_does_not_blame_the_right_camera(sigma: float, density: float) -> None:
    adu, cfg = dense(sigma, density)
    check = calibrate_movie(adu, cfg.camera, frames=10).camera_check
    assert check.quiet_ratio > 3  # the quiet pixels' variance over time holds much unfound emitter light ...
    assert check.ok, check.warnings  # ... which the check no longer takes for camera noise
    assert check.noise_method in ("vertical", "horizontal") and check.noise_ratio == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize("factor", [2.0, 0.5])
def test_a_wrong_gain_is_still_flagged_on_a_dense_movie(factor: float) -> None:
    adu, cfg = dense(2.0, 2.0)
    camera = replace(cfg.camera, e_per_adu=cfg.camera.e_per_adu * factor)
    check = calibrate_movie(adu, camera, frames=10).camera_check
    assert not check.ok and "do not fit this movie" in check.warnings[0]
    assert check.noise_ratio == pytest.approx(factor, rel=0.15)  # the old estimate read 11x and 2.8x


def _noise(rng: np.random.Generator, light: np.ndarray, row_correlation: float = 0.0) -> np.ndarray:
    """Gaussian noise of variance SLOPE·light + READ, its neighbours along rows correlated by ``row_correlation``."""
    e = rng.standard_normal((light.shape[0], light.shape[1], light.shape[2] + 1))
    a = (1 - np.sqrt(1 - 4 * row_correlation**2)) / (2 * row_correlation) if row_correlation else 0.0
    unit = (e[..., :-1] + a * e[..., 1:]) / np.sqrt(1 + a * a)  # lag-1 correlation a / (1 + a²)
    return light + unit * np.sqrt(SLOPE * light + READ)


def _estimates(photons: np.ndarray) -> tuple[float, float, float, object]:
    quiet, spatial = QuietStats(photons.shape[1:]), SpatialNoiseStats(photons.shape[1:])
    every = np.ones(photons.shape, dtype=bool)
    quiet.add(photons, every)
    spatial.add(photons, every)
    chosen = choose(quiet, spatial, SLOPE, READ)
    return (chosen.quiet_ratio, excess_ratio(spatial.estimate("vertical"), SLOPE, READ),
            excess_ratio(spatial.estimate("horizontal"), SLOPE, READ), chosen)


def test_blinking_smooth_light_is_predicted_not_counted_as_noise() -> None:
    rng = np.random.default_rng(0)
    light = np.full((20, 96, 96), 40.0)
    for t in range(len(light)):  # dim broad spots (never masked), on in one frame, off in the next
        spots = np.zeros((96, 96))
        spots[rng.integers(0, 96, 30), rng.integers(0, 96, 30)] = 30.0 * 2 * np.pi * 3.0**2
        light[t] += ndimage.gaussian_filter(spots, 3.0)
    temporal, vertical, horizontal, chosen = _estimates(_noise(rng, light))
    assert temporal > 1.5
    assert vertical == pytest.approx(1.0, abs=0.05) and horizontal == pytest.approx(1.0, abs=0.05)
    assert chosen.method in ("vertical", "horizontal")


def test_a_readout_correlating_neighbours_along_rows_is_measured_down_the_columns() -> None:
    """The real EMCCD movie's rows correlate neighbours by +0.16: the difference along them reads ~20 % low."""
    rng = np.random.default_rng(1)
    temporal, vertical, horizontal, chosen = _estimates(_noise(rng, np.full((20, 96, 96), 40.0), 0.16))
    assert horizontal < 0.85
    assert vertical == pytest.approx(1.0, abs=0.05) and temporal == pytest.approx(1.0, abs=0.05)
    assert excess_ratio(chosen, SLOPE, READ) == pytest.approx(1.0, abs=0.05)
