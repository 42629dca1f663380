"""Density, photons and background of a movie recorded with a known PSF, from its pixels' cumulants.

Where spots overlap or spread over many pixels (dense movies, out-of-focus and double-helix spots in 3-D) the
calibration cannot count them or measure their photons with a Gaussian: on ``bench_3d``'s double helix at 2
emitters/µm² it found 0.02 of them, and twice the background (emitter light between the spots); on its astigmatic
PSF at 0.3 /µm², a quarter of the photons. ``benchmarks/results/crowding.md`` compares fits matched to the
calibration alone, to these cumulants and to the movie's true physics.

Campbell's theorem needs no spot found: for emitters scattered at random with density ρ (per µm²), each giving N
photons in a frame spread by the PSF h (unit sum over pixels of area a µm²), the light of a pixel has the mean
bg + ρ·a·E[N] and the k-th cumulant ρ·a·E[N^k]·Σh^k. With the emitters' variance and third cumulant beyond the
camera's noise (``cumulants``) and the PSF's sums Σh², Σh³ averaged over its z range and sub-pixel positions:

    E[N] = (κ3/κ2)·(s2·Σh²)/(s3·Σh³),   ρ = κ2/(a·E[N]²·s2·Σh²),   bg = mean − ρ·a·E[N]

where s2 = E[N²]/E[N]² and s3 = E[N³]/E[N]³ are the shape of the photons per frame: that of the simulator's emitters
(``simulate.emitters``: a lognormal flux of relative spread ``FLUX_SPREAD``, on for the calibrated on-time, partly
on in their first and last frame). The shape is assumed, not measured (the fourth cumulant could measure it; in a
trial on 60 and 200 frames, not in a report, it was too noisy to); ``crowding.md`` shows how far off the estimates
are on movies unlike it (flux spread 0.1 and 0.6, on-time 4 frames).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from decode_mem.calibrate.match import rounded

FLUX_SPREAD = 0.3  # relative standard deviation of the flux (photons per full frame on) assumed for the shape
ON_TIME_RANGE = (1.0, 5.0)  # frames: the calibrated on-time, clipped to this, sets the shape's blinking
Z_SAMPLES = 41  # z planes over the range, and ...
SHIFTS = 4  # ... sub-pixel positions per plane, over which the PSF's sums are averaged
SHAPE_FRAMES = 400  # frames of the simulated emitters whose photons give the shape
SHAPE_MOVIES = 50


@dataclass(frozen=True)
class CrowdedPhysics:
    """What the pixels' cumulants give: ``density_per_um2``, ``flux_median`` (photons per full frame on, the
    median of the assumed lognormal), ``photons_mean`` (per frame, partial frames included), ``background_photons``
    (photons/px), and the assumptions and inputs behind them."""

    density_per_um2: float
    flux_median: float
    photons_mean: float
    background_photons: float
    inputs: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        values = {"density_per_um2": self.density_per_um2, "flux_median": self.flux_median,
                  "photons_mean": self.photons_mean, "background_photons": self.background_photons, **self.inputs}
        return {**{k: rounded(v) for k, v in values.items()}, "assumed_flux_spread": FLUX_SPREAD}


def psf_sums(spline: Any, z_range: tuple[float, float], seed: int = 0) -> tuple[float, float]:
    """Σh² and Σh³ of the unit-flux PSF, averaged over ``Z_SAMPLES`` planes of ``z_range`` and ``SHIFTS``
    sub-pixel positions per plane."""
    z = torch.linspace(float(z_range[0]), float(z_range[1]), Z_SAMPLES, dtype=torch.float64).repeat_interleave(SHIFTS)
    gen = torch.Generator().manual_seed(seed)
    x, y = (torch.rand(len(z), generator=gen, dtype=torch.float64) - 0.5 for _ in range(2))
    h = spline.patches(x, y, z, spline.patch_size)[0].double()
    return float((h**2).sum((1, 2)).mean()), float((h**3).sum((1, 2)).mean())


def photon_shape(on_time: float) -> tuple[float, float, float]:
    """(E[N]/median flux, E[N²]/E[N]², E[N³]/E[N]³) of the photons per frame of the simulator's emitters with a
    lognormal flux of spread ``FLUX_SPREAD`` and the mean on-time ``on_time`` (frames)."""
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.emitters import frame_rows, seeded_generator, stationary_emitters

    cfg = SimulationConfig.from_dict({"frame_size": [64, 64], "density": 1.0, "photons_mean": 1.0,
                                      "photons_std": FLUX_SPREAD, "photons_dist": "lognormal", "photons_min": 1e-9,
                                      "on_time": float(np.clip(on_time, *ON_TIME_RANGE))})
    emitters = stationary_emitters(cfg, SHAPE_FRAMES, seeded_generator(0), n_movies=SHAPE_MOVIES)
    n = frame_rows(emitters, 0, SHAPE_FRAMES).photons.double().numpy()
    median = math.exp(-math.log1p(FLUX_SPREAD**2) / 2)  # of the lognormal of mean 1
    m1 = float(n.mean())
    return m1 / median, float((n**2).mean()) / m1**2, float((n**3).mean()) / m1**3


def crowded_physics(estimates: dict[str, float], pixel_size_nm: float, spline: Any,
                    z_range: tuple[float, float]) -> CrowdedPhysics | None:
    """Density, photons and background from a calibration's ``estimates`` (``emitter_light_variance``,
    ``emitter_light_third``, ``pixel_light_photons``, ``on_time_frames``) and the PSF; None where the emitters'
    light is not measurably above the camera's noise (no positive cumulants)."""
    k2, k3 = estimates.get("emitter_light_variance"), estimates.get("emitter_light_third")
    mean = estimates.get("pixel_light_photons")
    if k2 is None or k3 is None or mean is None or not (k2 > 0 and k3 > 0 and math.isfinite(k2 * k3 * mean)):
        return None
    on_time = estimates.get("on_time_frames")
    on_time = float(on_time) if on_time is not None and math.isfinite(on_time) else 2.0
    h2, h3 = psf_sums(spline, z_range)
    per_median, s2, s3 = photon_shape(on_time)
    area = (pixel_size_nm / 1000.0) ** 2
    photons = (k3 / k2) * (s2 * h2) / (s3 * h3)
    density = k2 / (area * photons**2 * s2 * h2)
    background = mean - density * area * photons
    inputs = {"emitter_light_variance": k2, "emitter_light_third": k3, "pixel_light_photons": mean,
              "on_time_frames": on_time, "psf_sum_h2": h2, "psf_sum_h3": h3, "shape_s2": s2, "shape_s3": s3}
    return CrowdedPhysics(density, photons / per_median, photons, background, inputs)



def crowded_estimates(estimates: dict[str, float], physics: CrowdedPhysics | None) -> dict[str, float]:
    """``estimates`` with the pixels' cumulants' physics folded in, for ``simulation_from_estimates``: the density
    the larger of the detected one (a lower bound) and ρ (the matched band, [d/1.5, 3d], then holds ρ's error on
    movies unlike the assumed shape); the flux median from the cumulants (a Gaussian fit takes a part of a 3-D
    spot's light, more or less with z) and its log-spread no wider than the assumed shape's (the fits' spread is
    that of their share of the light); the background band spanning both the calibrated level (raised by the light
    between spots) and the cumulants' one (lowered where the PSF's z range is wider than the movie's: its sums Σh²
    then smaller). Unchanged without ``physics``."""
    if physics is None:
        return dict(estimates)
    out = dict(estimates)

    def finite(name: str) -> float | None:
        v = estimates.get(name)
        return float(v) if v is not None and math.isfinite(v) else None

    out["density_per_um2"] = max(finite("density_per_um2") or 0.0, physics.density_per_um2)
    out["flux_median"] = physics.flux_median
    spread = math.sqrt(math.log1p(FLUX_SPREAD**2))
    measured = finite("flux_log_sd")
    out["flux_log_sd"] = spread if measured is None else min(measured, spread)
    levels = [v for v in (finite("background_photons"), physics.background_photons) if v is not None and v > 0]
    if levels:
        out["background_photons_low"], out["background_photons_high"] = min(levels), max(levels)
    return out
