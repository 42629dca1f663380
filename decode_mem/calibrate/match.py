"""From estimates to training physics, and from a model's envelope to "does it cover this movie?".

``simulation_from_estimates`` is the one place that turns a calibration into a ``SimulationConfig``: a band of
physics around what was measured (the estimates have errors, a network trained on a band tolerates them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from decode_mem.io.camera import Camera
from decode_mem.simulate.config import SimulationConfig

TRAIN_FRAME = (40, 40)  # px: simulated training windows (the model is fully convolutional)
SIGMA_BAND = 0.15  # PSF sigma drawn per window within ±15 % of the measured one
LEVEL_BAND = 1.3  # background level drawn log-uniformly within /1.3 .. ×1.3 of the measured one (× drift)
PHOTONS_BAND = 2.5  # photons log-uniform within median / and × max(2.5, exp(2.5 log-sd))
SMOOTH_SPREAD = 1.25  # a background spread (p95/p5) above this: smooth and cell-like fields in training
SENSOR_SPREAD = 0.1  # sCMOS per-pixel spread of gain, read noise and offset (relative): with maps, or unmeasured
SENSOR_BAND = 1.5  # without maps: spreads drawn within / and × this of the measured one
UNIFORM_SPREAD = 0.01  # a measured spread below this: a uniform sensor (training draws from 0 up to this)
PHOTONS_LOG_SD = 0.35  # lognormal width used when the flux spread was not measured
# how far outside a model's training range an estimate may lie and still count as covered (relative): the
# estimates' own errors (a few %) plus what a network trained on a range tolerates around its edges
COVER_TOLERANCE = {"psf_sigma_px": 0.1, "photons": 0.5, "background_photons": 0.5, "pixel_size_nm": 0.1}


def simulation_from_estimates(values: Mapping[str, float], camera: Camera) -> dict[str, Any]:
    """The ``simulation`` section (SimulationConfig keys, validated) of training physics that match a movie;
    ``values`` maps estimate names to values (``Calibration.estimates``). Missing or NaN values fall back to
    the simulator's defaults.

    - PSF: σ within ±``SIGMA_BAND`` of ``psf_sigma_px`` per window, 5 % per emitter;
    - photons: log-uniform around the flux median ``flux_median`` (``photons_median`` when no full-on frames
      were seen), wide enough for its log-spread ``flux_log_sd``;
    - background: log-uniform around ``background_photons`` (widened by √``background_time_ratio`` when it
      changes over the movie, and to span ``background_photons_low``..``_high`` where two estimates disagree:
      ``crowding.crowded_estimates``); a spread above ``SMOOTH_SPREAD`` trains on uniform, smooth and cell-like
      fields;
    - density: from ``density_per_um2`` (a detected lower bound) up to 3× it; on-time around ``on_time_frames``
      − 1 (an emitter on for τ frames at a random phase touches τ + 1 frames);
    - the camera of the movie (its per-pixel maps fit the movie's frames, not the training windows): with the
      user's maps, sCMOS windows get random maps of ``SENSOR_SPREAD`` and are converted with them, as the
      user's frames will be; without maps, windows are converted with the camera's scalars, as the frames
      will be, and get the sensor's measured fixed pattern (``sensor_spread``): a spread drawn within
      /× ``SENSOR_BAND`` of it, from 0 up to ``UNIFORM_SPREAD`` for a uniform sensor, or from 0 to
      ``SENSOR_SPREAD`` when it was not measured.
    """
    def get(name: str, default: float) -> float:
        v = values.get(name)
        return float(v) if v is not None and math.isfinite(float(v)) else default

    sigma = min(max(get("psf_sigma_px", 1.0), 0.3), 5.0)
    median = max(get("flux_median", get("photons_median", 5000.0)), 10.0)
    spread_photons = max(PHOTONS_BAND, math.exp(2.5 * get("flux_log_sd", PHOTONS_LOG_SD)))
    level = max(get("background_photons", 100.0), 0.5)
    low, high = max(get("background_photons_low", level), 0.5), max(get("background_photons_high", level), 0.5)
    drift = math.sqrt(max(get("background_time_ratio", 1.0), 1.0))  # the level changes over the movie (bleaching)
    density = max(get("density_per_um2", 1.0), 0.02)
    on_time = max(get("on_time_frames", 3.0) - 1.0, 0.5)
    section = {
        "frame_size": list(TRAIN_FRAME),
        "density_range": [rounded(density / 1.5), rounded(3.0 * density)],
        "photons_dist": "loguniform",
        "photons_range": [rounded(median / spread_photons), rounded(median * spread_photons)],
        "on_time_range": [rounded(on_time / 1.5), rounded(on_time * 1.5)],
        "bg": [rounded(min(level, low) / (LEVEL_BAND * drift)), rounded(max(level, high) * LEVEL_BAND * drift)],
        "bg_dist": "loguniform",
        "bg_mode": "mixed" if get("background_spread", 1.0) > SMOOTH_SPREAD else "uniform",
        "psf_sigma_range": [rounded(sigma * (1 - SIGMA_BAND)), rounded(sigma * (1 + SIGMA_BAND))],
        "psf_sigma_jitter": 0.05,
        "margin": rounded(max(3.0, 3.5 * sigma)),
        "camera": {k: v for k, v in camera.without_maps().to_dict().items() if v is not None},
    }
    if camera.kind == "scmos":
        if camera.has_maps:
            section.update(sensor_variation=SENSOR_SPREAD, maps_known=1.0)
        else:
            spread = sensor_spread(get("sensor_pattern_photons", math.nan), level, camera)
            if not math.isfinite(spread):
                band = [0.0, SENSOR_SPREAD]
            elif spread < UNIFORM_SPREAD:
                band = [0.0, UNIFORM_SPREAD]
            else:
                band = [rounded(spread / SENSOR_BAND), rounded(min(spread * SENSOR_BAND, 0.9))]
            section.update(sensor_variation_range=band, maps_known=0.0)
    SimulationConfig.from_dict(section)  # a ConfigError here, not when training starts
    return section


def sensor_spread(pattern_photons: float, level: float, camera: Camera) -> float:
    """The simulator's ``sensor_variation`` whose fixed pattern is ``pattern_photons`` (a standard deviation,
    photons) over a background of ``level`` photons/px converted with ``camera``'s scalars: relative spreads v
    of offset and gain give v·√(level² + (baseline in photons)²) (``simulate.noise.sensor_maps``)."""
    offset = camera.baseline / camera.adu_per_photon
    return pattern_photons / math.hypot(level, offset)


def rounded(v: float) -> float:
    """``v`` to 5 significant digits: the numbers of a matched simulation and of what it was matched to."""
    return float(f"{v:.5g}")


def covers(calibration: Any, envelope: Mapping[str, Any]) -> list[str]:
    """The estimates of ``calibration`` (a Calibration, or a mapping name -> value with ``camera_kind`` and
    ``pixel_size_nm``) that fall outside a model's training ``envelope``; one line each, empty if covered.

    Keys read, each optional: ``psf_sigma_px``, ``photons`` (flux per full frame on), ``background_photons``,
    ``pixel_size_nm`` ([lo, hi] each, widened by ``COVER_TOLERANCE``), ``camera_kinds`` (list);
    ``background_kinds`` (a varying background against a model that saw only uniform ones) and
    ``density_per_um2`` (only above: the detected density is a lower bound).
    """
    if hasattr(calibration, "estimates"):
        values = {k: e.value for k, e in calibration.estimates.items()}
        values["pixel_size_nm"] = calibration.camera.pixel_size
        values["camera_kind"] = calibration.camera.kind
    else:
        values = dict(calibration)
    flux = values.get("flux_median")
    if flux is None or not math.isfinite(float(flux)):
        flux = values.get("photons_median")
    checks = [("psf_sigma_px", values.get("psf_sigma_px"), "PSF sigma", "px"),
              ("photons", flux, "photons per frame", ""),
              ("background_photons", values.get("background_photons"), "background", "photons/px"),
              ("pixel_size_nm", values.get("pixel_size_nm"), "pixel size", "nm")]
    out = []
    for key, value, label, unit in checks:
        bounds = envelope.get(key)
        if bounds is None or value is None or not math.isfinite(float(value)):
            continue
        tol = COVER_TOLERANCE[key]
        lo, hi = (float(b) for b in bounds)
        if not lo * (1 - tol) <= float(value) <= hi * (1 + tol):
            out.append(f"{label} {float(value):.4g}{' ' + unit if unit else ''} outside the model's "
                       f"[{lo:.4g}, {hi:.4g}]")
    kinds = envelope.get("camera_kinds")
    kind = values.get("camera_kind")
    if kinds and kind is not None and kind not in kinds:
        out.append(f"camera kind {kind!r} not among the model's {list(kinds)}")
    spread = values.get("background_spread")
    if (list(envelope.get("background_kinds") or []) == ["uniform"] and spread is not None
            and float(spread) > SMOOTH_SPREAD):
        out.append(f"background varies across the field (p95/p5 {float(spread):.3g}); the model saw only uniform ones")
    density, bounds = values.get("density_per_um2"), envelope.get("density_per_um2")
    if density is not None and bounds is not None and math.isfinite(float(density)) and float(density) > bounds[1]:
        out.append(f"density {float(density):.3g} /µm² (detected) above the model's {float(bounds[1]):.3g}")
    return out
