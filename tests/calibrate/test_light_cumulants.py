"""The emitters' light cumulants come from frames spread over the movie: consecutive frames share their emitters,
and about the mean of a few of them the emitters' light is partly in the mean (what a 1024² movie's calibration
once measured: blocks of 4 frames)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from decode_mem.calibrate.cumulants import light_cumulants, spread_pixels
from decode_mem.calibrate.sampling import sample_runs
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


def test_blank_frames_are_left_out() -> None:
    adu, camera = movie()
    blanked = adu.copy()
    blanked[::10] = 0  # frames a camera or a reader left empty
    whole, holed = light_cumulants(adu[1::10], camera, frames=24), light_cumulants(blanked, camera, frames=FRAMES)
    kept = light_cumulants(np.delete(adu, np.s_[::10], axis=0), camera, frames=FRAMES)
    assert holed == kept and whole is not None


@pytest.mark.parametrize("n", [3, 5, 7, 9, 11, 13])
def test_few_frames_still_give_groups_of_three(n: int) -> None:
    adu, camera = movie()
    light = light_cumulants(adu[:n], camera)
    assert light is not None and np.isfinite(light.variance) and np.isfinite(light.third)
    assert (light.variance_se is None) == (n < 6)


def test_which_frames_and_pixels() -> None:
    assert [t for t, _ in sample_runs(10_000, 5, run=1)] == [0, 2500, 5000, 7499, 9999]
    assert [t for t, _ in sample_runs(3, 64, run=1)] == [0, 1, 2]
    rows, cols = spread_pixels(1024, 2048, 1 << 16)  # 4 x 4 squares of 64² px over the field
    assert len(rows) == len(cols) == 256 and rows[0] == 96 and rows[-1] == 927 and cols[0] == 224
    assert np.array_equal(spread_pixels(64, 300, 1 << 16)[0], np.arange(64))
    assert light_cumulants(np.zeros((2, 8, 8), np.uint16), preset("emccd")) is None  # two frames: no third cumulant
