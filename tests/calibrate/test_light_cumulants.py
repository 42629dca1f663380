"""The emitters' light cumulants come from frames spread over the movie: consecutive frames share their emitters,
and about the mean of a few of them the emitters' light is partly in the mean (what a 1024² movie's calibration
once measured: blocks of 4 frames)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from decode_mem.calibrate.cumulants import central_square, light_cumulants, spread_frames
from decode_mem.io.camera import preset
from decode_mem.simulate import SimulationConfig, simulate_movie

FRAMES = 240


@functools.cache
def movie():
    """240 frames of 96² px, emitters on for 3 frames on average (and blinking back), EMCCD."""
    cfg = SimulationConfig(frame_size=(96, 96), density=1.0, photons_dist="lognormal", photons_mean=3000.0,
                           photons_std=900.0, on_time=3.0, bg=(50.0, 50.0), psf_sigma=(1.3, 1.3),
                           camera=preset("emccd"))
    adu = simulate_movie(cfg, FRAMES, seed=3)[0]
    adu.setflags(write=False)
    return adu, cfg.camera


def test_frames_spread_over_the_movie_read_the_cumulants_that_consecutive_frames_miss() -> None:
    adu, camera = movie()
    every = light_cumulants(adu, camera, frames=FRAMES)  # the per-pixel statistics over the whole movie
    spread = light_cumulants(adu, camera, frames=24)  # every 10th frame
    assert spread.variance == pytest.approx(every.variance, rel=0.1)
    assert spread.third == pytest.approx(every.third, rel=0.15)
    assert spread.variance_se is not None and spread.third_se is not None
    runs = [light_cumulants(adu[t0:t0 + 4], camera) for t0 in range(0, FRAMES, 4)]  # the old 4-frame blocks
    assert np.mean([r.variance for r in runs]) < 0.6 * every.variance
    assert np.mean([r.third for r in runs]) < 0.3 * every.third


def test_a_background_that_fades_over_the_movie_does_not_count() -> None:
    adu, camera = movie()
    fading = adu.astype(np.float32) + np.linspace(300.0, 0.0, FRAMES, dtype=np.float32)[:, None, None]
    steady, faded = light_cumulants(adu, camera, frames=24), light_cumulants(fading, camera, frames=24)
    assert faded.variance == pytest.approx(steady.variance, rel=0.03)
    assert faded.third == pytest.approx(steady.third, rel=0.03)


def test_which_frames_and_pixels() -> None:
    assert spread_frames(10_000, 5).tolist() == [0, 2500, 5000, 7499, 9999]
    assert spread_frames(3, 256).tolist() == [0, 1, 2]
    assert central_square(1024, 2048, 1 << 16) == (slice(384, 640), slice(896, 1152))
    assert central_square(64, 64, 1 << 16) == (slice(0, 64), slice(0, 64))
    assert light_cumulants(np.zeros((2, 8, 8), np.uint16), preset("emccd")) is None  # two frames: no third cumulant
