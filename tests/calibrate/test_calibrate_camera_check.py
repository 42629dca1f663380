"""The camera check: silent with the right camera, loud (with the likely fix) with a wrong one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from calibrate_helpers import movie

from decode_mem.calibrate import calibrate_movie
from decode_mem.calibrate.match import UNIFORM_SPREAD, sensor_spread
from decode_mem.io.camera import Camera

# ../shared/data/real beside the repository (DESIGN.md §8), or the shared folder of the development machine
_NAME = "shared/data/real/locan_dstorm_5frames.tif"
REAL = next((p for p in (Path(__file__).resolve().parents[3] / _NAME, Path("/work") / _NAME) if p.is_file()),
            Path("/work") / _NAME)


def test_scmos_movie_read_with_the_emccd_default_is_flagged() -> None:
    adu, _, _, cfg = movie(1.0, 100.0, "scmos", seed=3)
    right = calibrate_movie(adu, cfg.camera, frames=60)
    wrong = calibrate_movie(adu, Camera.emccd(), frames=60)
    assert right.camera_check.ok and right.camera_check.noise_ratio == pytest.approx(1.0, abs=0.15)
    assert not wrong.camera_check.ok
    # EMCCD settings predict 2/0.9 photons² per photon, and 6 ADU per photon instead of 1.6: ratio ~0.15
    assert wrong.camera_check.noise_ratio < 0.3
    assert "do not fit this movie" in wrong.camera_check.warnings[0]
    # the sCMOS preset explains the noise as the pixels are: the camera kind is the first fix named
    fixes = wrong.camera_check.warnings[0].split("do not fit this movie (")[1]
    assert fixes.startswith("a camera of kind scmos fits this noise: --camera scmos")


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


def test_scmos_pixel_maps_are_used_and_their_absence_is_noticed(tmp_path: Path) -> None:
    from decode_mem.simulate.movie import MovieSimulator

    adu, _, _, cfg = movie(1.1, 30.0, "scmos", seed=3, sensor_variation=0.3)
    maps = MovieSimulator(cfg, 3).sensor  # the per-pixel offset, gain and read noise the movie was made with
    np.save(tmp_path / "offset.npy", maps.baseline.numpy())
    np.save(tmp_path / "gain.npy", maps.e_per_adu.numpy())
    np.save(tmp_path / "variance.npy", (maps.read_noise / maps.e_per_adu).numpy() ** 2)  # ADU²
    camera = Camera.scmos(offset_map=str(tmp_path / "offset.npy"), e_per_adu_map=str(tmp_path / "gain.npy"),
                          variance_map=str(tmp_path / "variance.npy"))
    with_maps = calibrate_movie(adu, camera, frames=60)
    assert with_maps.camera_check.ok, with_maps.camera_check.warnings
    assert with_maps.value("background_photons") == pytest.approx(30.0, rel=0.05)
    assert with_maps.value("psf_sigma_px") == pytest.approx(1.1, rel=0.05)
    without = calibrate_movie(adu, Camera.scmos(), frames=60)  # 30 % per-pixel offset spread, ignored
    assert any("offset_map" in w for w in without.camera_check.warnings)
    # the fixed pattern, in the simulator's terms: gone once converted with the maps, 0.3 without them
    spread = {name: sensor_spread(c.value("sensor_pattern_photons"), c.value("background_photons"), Camera.scmos())
              for name, c in (("with", with_maps), ("without", without))}
    assert spread["with"] < UNIFORM_SPREAD and spread["without"] == pytest.approx(0.3, rel=0.15)
    lo, hi = without.to_yaml_dict()["train"]["simulation"]["sensor_variation_range"]
    assert lo < 0.3 < hi  # fit trains on the sensor it measured


def test_bleaching_background_is_no_camera_noise() -> None:
    """The noise variance is taken within runs of consecutive frames, so a background halving every 1000
    frames does not look like excess noise; the change shows in background_time_ratio."""
    from calibrate_helpers import config

    from decode_mem.simulate import simulate_movie

    cfg = config(1.0, 100.0, "emccd", frame_size=(32, 32), bg_bleach=0.5)
    adu, _, _ = simulate_movie(cfg, 2000, seed=1)
    cal = calibrate_movie(adu, cfg.camera, frames=100)
    assert cal.camera_check.ok and cal.camera_check.noise_ratio == pytest.approx(1.0, abs=0.15)
    assert cal.value("background_time_ratio") > 2.5  # 100 -> ~26 photons over the sampled runs
    low, high = cal.to_yaml_dict()["train"]["simulation"]["bg"]
    assert low < 35 and high > 80


def test_a_read_noise_above_the_measured_noise_is_a_sentence_about_the_read_noise() -> None:
    adu = movie(1.0, 100.0, "emccd", seed=5)[0]
    too_noisy = Camera.emccd(read_noise=6000.0)  # 6000 e- alone predict ~490 photons², the pixels have ~220
    cal = calibrate_movie(adu, too_noisy, frames=60)
    assert cal.camera_check.noise_ratio < 0  # the ratio itself is not shown to the user
    line = next(w for w in cal.camera_check.warnings if "read noise" in w)
    assert "less noisy than the camera's read noise alone predicts" in line and "set too high" in line
    assert "6000 e-" in line
    assert not any("x what the camera settings predict" in w for w in cal.camera_check.warnings)


def test_the_fix_offered_first_is_one_a_camera_can_have() -> None:
    """An EMCCD at ~9 e-/ADU read with the preset's 45 (a user's first hour, a real movie): the noise is ~5x the
    prediction. The e-/ADU that explains it comes first; the baseline that would (at the preset's gain) lies below
    0 ADU, which no camera has, and is not offered."""
    adu = movie(1.0, 100.0, "emccd", seed=5, camera=Camera.emccd(e_per_adu=9.0))[0]
    cal = calibrate_movie(adu, Camera.emccd(), frames=60)
    check = cal.camera_check
    assert check.noise_ratio > 3 and check.implied_baseline_adu < 0
    line = check.warnings[0]
    assert "e_per_adu would be ~" in line and "baseline would be" not in line, line
    assert float(line.split("e_per_adu would be ~")[1].split(",")[0]) == pytest.approx(9.0, rel=0.25)
    # where the implied baseline is one a camera can have (between 0 and the background's level), it follows
    from decode_mem.calibrate.camera_check import _warnings

    common = dict(frames=60, zero_frames=0, below=0.0, expected_below=0.0, level=100.0, noise_ratio=2.0,
                  slope_ratio=None, zero_adu=None, implied_e=22.5)
    both = _warnings(Camera.emccd(), implied_baseline=150.0, **common)[0]
    assert "e_per_adu would be ~22.5" in both and "the baseline would be ~150 ADU" in both
    # the smaller change first: the baseline moved by a twelfth of the background, e-/ADU halved
    assert both.index("the baseline would be ~150 ADU") < both.index("e_per_adu would be ~22.5")
    near = _warnings(Camera.emccd(), implied_baseline=150.0, **{**common, "implied_e": 44.0})[0]
    assert near.index("e_per_adu would be ~44") < near.index("the baseline would be ~150 ADU")
    assert "baseline would be" not in _warnings(Camera.emccd(), implied_baseline=-5170.0, **common)[0]
    assert "e_per_adu would be" not in _warnings(Camera.emccd(), implied_baseline=150.0,
                                                 **{**common, "implied_e": 533.0})[0]  # no camera has 533 e-/ADU


def test_calibrate_and_infer_give_one_verdict_on_a_wrong_camera(tmp_path, capsys) -> None:
    import tifffile

    from decode_mem.calibrate.__main__ import main

    adu = movie(1.0, 100.0, "emccd", seed=5, camera=Camera.emccd(e_per_adu=9.0))[0]
    tifffile.imwrite(tmp_path / "m.tif", adu[:60])
    assert main([str(tmp_path / "m.tif"), "--camera", "emccd", "--out", str(tmp_path / "c.yaml")]) == 0
    printed = capsys.readouterr().out
    assert "camera check: suspect" in printed
    model_line = next(line for line in printed.splitlines() if line.startswith("model "))
    assert "does NOT cover this movie" in model_line and "do not fit this movie" in model_line, model_line
