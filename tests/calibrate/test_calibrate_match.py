"""From estimates to training settings, and the envelope check."""

from __future__ import annotations

import math

import pytest

from decode_mem.calibrate import covers, simulation_from_estimates
from decode_mem.calibrate.match import sensor_spread
from decode_mem.io.camera import Camera
from decode_mem.simulate.config import SimulationConfig

ESTIMATES = {"psf_sigma_px": 1.4, "background_photons": 80.0, "background_spread": 1.02, "photons_median": 1500.0,
             "flux_median": 2500.0, "flux_log_sd": 0.3, "density_per_um2": 0.7, "on_time_frames": 3.5}
ENVELOPE = {"psf": "gauss2d", "pixel_size_nm": [100.0, 100.0], "psf_sigma_px": [1.0, 1.0], "photons": [2000.0, 8000.0],
            "background_photons": [60.0, 150.0], "background_kinds": ["uniform"], "camera_kinds": ["emccd"],
            "density_per_um2": [0.5, 2.0]}


def test_simulation_section_follows_the_estimates() -> None:
    camera = Camera.scmos(pixel_size=108.0, offset_map="offsets.npy")
    sim = simulation_from_estimates(ESTIMATES, camera)
    cfg = SimulationConfig.from_dict(sim)
    lo, hi = cfg.psf_sigma_range
    assert lo < 1.4 < hi and hi / lo == pytest.approx(1.15 / 0.85)  # a band around the measured width
    assert cfg.density_range[0] < 0.7 < cfg.density_range[1]
    assert cfg.on_time_range[0] < 2.5 < cfg.on_time_range[1]
    assert cfg.photons_dist == "loguniform" and cfg.photons_range[0] < 2500 < cfg.photons_range[1]
    assert cfg.bg[0] < 80.0 < cfg.bg[1] and cfg.bg_dist == "loguniform" and cfg.bg_mode == "uniform"
    assert cfg.camera.kind == "scmos" and cfg.camera.pixel_size == 108.0
    assert "offset_map" not in sim["camera"]  # maps fit the movie's frames, not the training frames
    assert cfg.sensor_variation > 0 and cfg.maps_known == 1.0  # trained as the maps will be used
    assert cfg.margin >= 3 * 1.4  # emitters beyond the edge, as far as their light reaches
    scmos = Camera.scmos(pixel_size=108.0)

    def band(**values: float) -> tuple[float, float]:
        cfg = SimulationConfig.from_dict(simulation_from_estimates(dict(ESTIMATES, **values), scmos))
        assert cfg.maps_known == 0.0  # no maps: converted with the scalars, as the movie will be
        return cfg.sensor_variation_range

    # the measured fixed pattern, in photons, as the simulator's relative spread: v·√(level² + offset²)
    pattern = 0.12 * math.hypot(80.0, scmos.baseline / scmos.adu_per_photon)
    assert sensor_spread(pattern, 80.0, scmos) == pytest.approx(0.12)
    lo, hi = band(sensor_pattern_photons=pattern)
    assert lo == pytest.approx(0.12 / 1.5, rel=1e-3) and hi == pytest.approx(0.12 * 1.5, rel=1e-3)
    assert band(sensor_pattern_photons=0.0) == (0.0, 0.01)  # a uniform sensor
    assert band() == (0.0, 0.1)  # not measured: from uniform to varied


def test_missing_or_unmeasured_values_fall_back_to_defaults() -> None:
    sim = simulation_from_estimates({"psf_sigma_px": 1.1, "on_time_frames": float("nan"), "flux_median": None,
                                     "photons_median": 900.0, "background_spread": 3.0}, Camera.emccd())
    cfg = SimulationConfig.from_dict(sim)
    assert cfg.on_time_range[0] < 2.0 < cfg.on_time_range[1]  # default track length 3 frames
    assert cfg.photons_range[0] < 900.0 < cfg.photons_range[1]  # the per-frame median when no full-on frames
    assert cfg.bg_mode == "mixed"  # a varying background: train on uniform, smooth and cell-like fields


def test_covers_lists_what_is_outside_the_envelope() -> None:
    inside = dict(ESTIMATES, psf_sigma_px=1.0, background_photons=100.0, pixel_size_nm=100.0, camera_kind="emccd")
    assert covers(inside, ENVELOPE) == []
    outside = dict(inside, psf_sigma_px=1.4, flux_median=600.0, camera_kind="scmos", pixel_size_nm=160.0)
    lines = covers(outside, ENVELOPE)
    assert len(lines) == 4
    assert any(s.startswith("PSF sigma 1.4 px") for s in lines) and any("'scmos'" in s for s in lines)
    assert any(s.startswith("photons per frame 600") for s in lines)
    assert any(s.startswith("pixel size 160 nm") for s in lines)
    varying = dict(inside, background_spread=2.5, density_per_um2=3.0)
    assert [s.split()[0] for s in covers(varying, ENVELOPE)] == ["background", "density"]
    assert covers(dict(inside, density_per_um2=0.05), ENVELOPE) == []  # a lower bound: fewer is no evidence


def test_covers_tolerates_missing_keys_and_values() -> None:
    assert covers({"psf_sigma_px": 3.0}, {}) == []
    assert covers({}, ENVELOPE) == []
    assert covers({"psf_sigma_px": float("nan")}, {"psf_sigma_px": [1, 2]}) == []
    assert covers({"photons_median": 100.0}, {"photons": [500, 1000]}) == [
        "photons per frame 100 outside the model's [500, 1000]"]
