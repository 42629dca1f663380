"""From estimates to training physics, and from a model's envelope to "does it cover this movie?".

``simulation_from_estimates`` is the one place that turns a calibration into a ``SimulationConfig``; it
uses only what the simulator has today (uniform or smooth background, one PSF width, lognormal photons).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from decode_mem.io.camera import Camera
from decode_mem.simulate.config import SimulationConfig

TRAIN_FRAME = (64, 64)  # px: simulated training frames (the model is fully convolutional)
LEVEL_MARGIN = 0.2  # the simulated background level covers ±20 % around the measured one
SMOOTH_SPREAD = 1.25  # a background spread (p95/p5) above this is simulated as a smooth field
SMOOTH_SCALE = 16.0  # px: correlation length of the simulated smooth field (not measured)
PHOTONS_LOG_SD = 0.35  # lognormal width used when the flux spread was not measured
# how far outside a model's training range an estimate may lie and still count as covered (relative): the
# estimates' own errors (a few %) plus what a network trained on a range tolerates around its edges
COVER_TOLERANCE = {"psf_sigma_px": 0.1, "photons": 0.5, "background_photons": 0.5, "pixel_size_nm": 0.1}


def simulation_from_estimates(values: Mapping[str, float], camera: Camera) -> dict[str, Any]:
    """The ``simulation`` section (SimulationConfig keys, validated) of training physics that match a movie;
    ``values`` maps estimate names to values (``Calibration.estimates``). Missing or NaN values fall back to
    the simulator's defaults.

    - PSF: ``psf_sigma_px``; photons: lognormal with the flux median ``flux_median`` (``photons_median``
      when no full-on frames were seen) and log-spread ``flux_log_sd``;
    - background: the level ``background_photons`` ±20 %, widened by √``background_time_ratio`` either way
      when it changes over the movie; a spread above ``SMOOTH_SPREAD`` becomes a smooth field whose
      amplitude reproduces it (``level·(1 ± a)`` spans the 5th to 95th percentile);
    - ``density_per_um2`` and ``on_time`` (mean track length − 1: an emitter on for τ frames at a random
      phase touches τ + 1 frames); the camera without its per-pixel maps (those fit the movie's frame
      size, not the training frames).
    """
    def get(name: str, default: float) -> float:
        v = values.get(name)
        return float(v) if v is not None and math.isfinite(float(v)) else default

    sigma = min(max(get("psf_sigma_px", 1.0), 0.3), 5.0)
    median = get("flux_median", get("photons_median", 5000.0))
    log_sd = get("flux_log_sd", PHOTONS_LOG_SD)
    mean = median * math.exp(log_sd**2 / 2)
    std = mean * math.sqrt(math.expm1(log_sd**2))
    level = max(get("background_photons", 100.0), 0.0)
    spread = get("background_spread", 1.0)
    drift = math.sqrt(max(get("background_time_ratio", 1.0), 1.0))  # the level changes over the movie (bleaching)
    low, high = level / drift * (1 - LEVEL_MARGIN), level * drift * (1 + LEVEL_MARGIN)
    bg: dict[str, Any] = {"bg": [_round(low), _round(high)], "bg_mode": "uniform"}
    if spread > SMOOTH_SPREAD:
        bg.update(bg_mode="smooth", bg_smooth_amplitude=_round(min((spread - 1) / (spread + 1), 1.0)),
                  bg_smooth_scale=SMOOTH_SCALE)
    section = {
        "frame_size": list(TRAIN_FRAME),
        "density": _round(max(get("density_per_um2", 1.0), 0.0)),
        "photons_dist": "lognormal", "photons_mean": _round(mean), "photons_std": _round(std),
        "on_time": _round(max(get("on_time_frames", 3.0) - 1.0, 0.5)),
        "psf_sigma": [_round(sigma)] * 2,
        "camera": {k: v for k, v in camera.without_maps().to_dict().items() if v is not None},
        **bg,
    }
    SimulationConfig.from_dict(section)  # a ConfigError here, not when training starts
    return section


def _round(v: float) -> float:
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
