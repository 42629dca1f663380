"""The camera check: silent with the right camera, loud (with the likely fix) with a wrong one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from calibrate_helpers import movie

from decode_mem.calibrate import calibrate_movie
from decode_mem.io.camera import Camera

REAL = Path("/work/shared/data/real/locan_dstorm_5frames.tif")
REAL = REAL if REAL.is_file() else Path(__file__).resolve().parents[3] / "shared/data/real/locan_dstorm_5frames.tif"


def test_scmos_movie_read_with_the_emccd_default_is_flagged() -> None:
    adu, _, _, cfg = movie(1.0, 100.0, "scmos", seed=3)
    right = calibrate_movie(adu, cfg.camera, frames=60)
    wrong = calibrate_movie(adu, Camera.emccd(), frames=60)
    assert right.camera_check.ok and right.camera_check.noise_ratio == pytest.approx(1.0, abs=0.15)
    assert not wrong.camera_check.ok
    # EMCCD settings predict 2/0.9 photons² per photon, and 6 ADU per photon instead of 1.6: ratio ~0.15
    assert wrong.camera_check.noise_ratio < 0.3
    assert "do not fit this movie" in wrong.camera_check.warnings[0]
    # with the baseline right (100), the e-/ADU that makes the noise consistent is named
    assert "e_per_adu would be" in wrong.camera_check.warnings[0]


def test_a_baseline_above_the_data_is_flagged() -> None:
    adu = movie(1.0, 20.0, "scmos", seed=4)[0]
    cal = calibrate_movie(adu, Camera.scmos(baseline=200.0), frames=40)  # the data sit at ~100 + 32 ADU
    assert cal.camera_check.below_baseline > 0.5
    assert any("baseline is too high" in w for w in cal.camera_check.warnings)


def test_all_zero_frames_are_counted_reported_and_left_out() -> None:
    adu, _, _, cfg = movie(1.0, 100.0, "emccd", seed=110)
    adu = adu[:60].copy()
    adu[[5, 6, 30]] = 0
    cal = calibrate_movie(adu, cfg.camera)
    assert cal.camera_check.zero_frames == 3 and cal.frames_used == 57
    assert any("3 of 60 sampled frames are all zero" in w for w in cal.camera_check.warnings)
    assert cal.value("background_photons") == pytest.approx(100.0, rel=0.05)
    assert cal.value("psf_sigma_px") == pytest.approx(1.0, rel=0.05)


@pytest.mark.skipif(not REAL.is_file(), reason="the real test movie (../shared/data/real) is not here")
def test_real_emccd_movie_with_the_default_camera() -> None:
    """The real movie's baseline is ~450–530 ADU (README); the default camera says 100 ADU.

    No pixel is below 100 ADU, so the share below the baseline cannot see this; the noise does: with a
    baseline of 100 the background would be ~70 photons, whose EMCCD noise is ~12x what the movie shows.
    The check names the baseline that makes the noise consistent with the default gain.
    """
    cal = calibrate_movie(REAL)
    check = cal.camera_check
    assert cal.metadata.source is None  # ImageJ file with unit 'pixel': no pixel size in it
    assert cal.shape == (5, 128, 128)
    assert check.below_baseline == 0.0
    assert not check.ok and check.noise_ratio < 0.3
    assert 440 <= check.implied_baseline_adu <= 540
    assert "baseline would be" in check.warnings[0]
    for name, e in cal.estimates.items():
        if name == "on_time_frames":  # 5 frames hold too few ended tracks to measure it: not a number
            assert np.isnan(e.value) and cal.counts["track_ends"] < 5
        else:
            assert np.isfinite(e.value), name
    assert 0.7 < cal.value("psf_sigma_px") < 2.0
    with_baseline = calibrate_movie(REAL, Camera.emccd(baseline=480.0))
    assert not any("baseline would be" in w for w in with_baseline.camera_check.warnings)
    assert 0 < with_baseline.value("background_photons") < cal.value("background_photons")
