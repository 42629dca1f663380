"""The physics a SimulationConfig implies: how many emitters a frame holds and how fast they switch on
(``start_rate``, the target slots ``k_max``), how wide its spots are (``sigma_range``, ``patch_size``) and the
envelope a model trained on it covers. ``SimulationConfig`` (the settings) exposes each as a property or method
of the same name; this module holds the formulas.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from decode_mem.simulate.config import SimulationConfig

PATCH_SIGMAS = 4.0  # a rendered spot covers ±ceil(4σ) px around its centre pixel


def max_density_px(cfg: SimulationConfig) -> float:
    """The largest density in emitters per px² any movie of this config gets."""
    return cfg.density_bounds[1] * (cfg.pixel_size_bounds[1] / 1000.0) ** 2


def extent(cfg: SimulationConfig) -> tuple[tuple[float, float], tuple[float, float]]:
    """((x_low, x_high), (y_low, y_high)) in px of the area emitters are placed in (frame + margin)."""
    h, w = cfg.frame_size
    m = cfg.margin
    return (-0.5 - m, w - 0.5 + m), (-0.5 - m, h - 0.5 + m)


def emitters_per_frame(cfg: SimulationConfig) -> float:
    """Expected number of emitters visible in a frame, over the whole placement area (frame + margin)."""
    (x0, x1), (y0, y1) = extent(cfg)
    return cfg.density * (x1 - x0) * (y1 - y0) * cfg.um2_per_px


def expected_in_frame(cfg: SimulationConfig) -> float:
    """Expected number of emitters visible in a frame with their centre inside the frame."""
    return cfg.density * cfg.height * cfg.width * cfg.um2_per_px


def start_rate_for(cfg: SimulationConfig, density_px: float, on_time: float | None = None) -> float:
    """Emitters switching on per frame over the placement area for ``density_px`` emitters/px²
    (and mean on-time ``on_time``, default ``cfg.on_time``)."""
    (x0, x1), (y0, y1) = extent(cfg)
    return density_px * (x1 - x0) * (y1 - y0) / ((cfg.on_time if on_time is None else on_time) + 1.0)


def start_rate(cfg: SimulationConfig) -> float:
    """Emitters switching on per frame over the placement area.

    An emitter with exponential on-time τ starting at a uniform time intersects τ + 1 frames on average,
    so ``start_rate·(on_time + 1) = emitters_per_frame`` in the stationary state.
    """
    return emitters_per_frame(cfg) / (cfg.on_time + 1.0)


def k_max(cfg: SimulationConfig) -> int:
    """K: ``max_emitters``, or mean + 8·sqrt(mean) + 8 of the in-frame count, rounded up to a multiple of 8.

    The in-frame count of a frame is Poisson distributed, so the automatic K is exceeded with a
    probability far below 1e-9 per sample.
    """
    if cfg.max_emitters is not None:
        return cfg.max_emitters
    mu = max_density_px(cfg) * cfg.height * cfg.width
    k = math.ceil(mu + 8.0 * math.sqrt(mu) + 8.0)
    return max(8, -(-k // 8) * 8)


def sigma0_bounds(cfg: SimulationConfig) -> tuple[tuple[float, float], tuple[float, float]]:
    """((σx0 low, high), (σy0 low, high)) in px over the movies of this config (in focus)."""
    if cfg.psf_sigma_range is not None:
        return cfg.psf_sigma_range, cfg.psf_sigma_range
    return (cfg.psf_sigma[0],) * 2, (cfg.psf_sigma[1],) * 2


def sigma_range(cfg: SimulationConfig) -> tuple[float, float]:
    """(smallest, largest) σ in px over both axes, the z range, the movies and the per-emitter spread."""
    (x_lo, x_hi), (y_lo, y_hi) = sigma0_bounds(cfg)
    spread = (1 - 3 * cfg.psf_sigma_jitter, 1 + 3 * cfg.psf_sigma_jitter)
    if not cfg.is_3d:
        return min(x_lo, y_lo) * spread[0], max(x_hi, y_hi) * spread[1]
    if cfg.psf in ("spline", "pupil"):
        return spline_width_range(cfg, spread)
    z = np.linspace(cfg.z_range[0], cfg.z_range[1], 2001)
    sx, sy = cfg.astigmatism.sigma_scale(z)
    lo = min(sx.min() * x_lo, sy.min() * y_lo) * spread[0]
    hi = max(sx.max() * x_hi, sy.max() * y_hi) * spread[1]
    return float(lo), float(hi)


def envelope(cfg: SimulationConfig) -> dict[str, Any]:
    """The physics this config covers, in the units a user measures (stored with every trained model).

    ``photons`` is the flux range (photons per frame on): the loguniform range, else mean ± 2 std;
    ``background_photons`` the range of the per-movie level (the median per pixel per frame).
    """
    if cfg.photons_dist == "loguniform":
        photons = cfg.photons_range
    else:
        photons = (max(cfg.photons_min, cfg.photons_mean - 2 * cfg.photons_std),
                   cfg.photons_mean + 2 * cfg.photons_std)
    kinds = ["uniform", "smooth", "cell"] if cfg.bg_mode == "mixed" else [cfg.bg_mode]
    (x_lo, x_hi), (y_lo, y_hi) = sigma0_bounds(cfg)
    sigma = [min(x_lo, y_lo), max(x_hi, y_hi)]
    extra: dict[str, Any] = {}
    if cfg.psf in ("spline", "pupil"):  # the spot widths over the z range (what a movie's spots measure)
        sigma = [round(v, 4) for v in sigma_range(cfg)]
        extra = {"psf_file": cfg.psf_file, "z_range_nm": list(cfg.z_range)}
    return {
        "psf": cfg.psf,
        **extra,
        "pixel_size_nm": list(cfg.pixel_size_bounds),
        "psf_sigma_px": sigma,
        "photons": [float(photons[0]), float(photons[1])],
        "background_photons": list(cfg.bg),
        "background_kinds": kinds,
        "camera_kinds": list(cfg.camera_kinds) or [cfg.camera.kind],
        "density_per_um2": list(cfg.density_bounds),
        "on_time_frames": list(cfg.on_time_range or (cfg.on_time, cfg.on_time)),
    }


def spline_width_range(cfg: SimulationConfig, spread: tuple[float, float]) -> tuple[float, float]:
    """(smallest, largest) RMS width in px of the spline PSF over ``z_range`` (the file's width curves)."""
    header = cfg.psf_header()
    if "widths" not in header:
        return 0.5, float(spline_half_width(cfg)) / PATCH_SIGMAS
    z, sx, sy = (np.asarray(a, np.float64) for a in header["widths"])
    inside = (z >= cfg.z_range[0] - 1e-6) & (z <= cfg.z_range[1] + 1e-6)
    if not inside.any():
        inside = np.abs(z - np.clip(z, *cfg.z_range)) == np.abs(z - np.clip(z, *cfg.z_range)).min()
    lo = float(min(sx[inside].min(), sy[inside].min())) * spread[0]
    hi = float(max(sx[inside].max(), sy[inside].max())) * spread[1]
    return lo, hi


def spline_half_width(cfg: SimulationConfig) -> int:
    """Half the extent in px of the spline PSF around its centre (the largest spot it can render)."""
    h = cfg.psf_header()
    _nz, ny, nx = h["shape"]
    half = min(h["x0"], nx - h["x0"], h["y0"], ny - h["y0"]) / h["upsample"] - 0.5
    return max(0, math.floor(half))


def patch_size(cfg: SimulationConfig) -> int:
    """Edge of the square patch a spot is rendered into: ``2·ceil(4·σ_max) + 1`` px (for a spline PSF at
    most the spline's own extent)."""
    size = 2 * math.ceil(PATCH_SIGMAS * sigma_range(cfg)[1]) + 1
    if cfg.psf in ("spline", "pupil"):
        size = min(size, 2 * spline_half_width(cfg) + 1)
    return size
