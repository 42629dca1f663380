"""The light of the emitters in a movie's pixels, beyond the camera's noise: the pixels' second and third cumulants.

Each pixel's value over time is its background plus the light of the emitters around it plus the camera's noise.
Over frames far enough apart that an emitter seen in one is not the one seen in another, the second and third
cumulants of a pixel's value are those of the emitters' light plus those of the noise, which the camera settings
predict from the mean light (in photons per photon: ``slope`` = F²/qe for the variance, as the camera check;
``third_per_photon`` for the third cumulant: an EMCCD's register multiplies each electron by an exponential gain,
6/qe²; a Poisson count, 1/qe²). What is left, pooled over pixels, is what Campbell's theorem relates to the
density, the photons and the PSF (``calibrate.crowding``): it needs no spot to be found, and so holds where spots
overlap or spread too much to be counted (dense and 3-D movies).

Why single frames spread over the movie (``light_cumulants``): emitters stay on, and come back, for several frames,
so consecutive frames share their light, and about the mean of a few consecutive frames that light is partly in
the mean. The calibration once took the cumulants about blocks of consecutive frames (as few as 3 or 4 for large
frames): on ``tests/calibrate/test_light_cumulants.py``'s movie (on-time 3 frames) blocks of 4 read under 60 % of
the second cumulant and under 30 % of the third that the whole movie reads, and a 1024² movie's 3-D fit in
``bench_field_psf.py`` was matched to several times its density (ad hoc, its fit.json). Each frame is taken about
its own mean level first, so that a background fading evenly over the field does not count. A movie of a few tens
of frames has no frames far apart: with ``bench_field_psf.py``'s physics (on-time 2 frames) and the true PSF, the
density read 0.94x / 0.97x / 1.10x the truth and the flux 1.01x / 1.01x / 0.91x from 400 / 100 / 30 frames (ad hoc).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from decode_mem.calibrate.camera_check import expected_slope, read_variance
from decode_mem.calibrate.sampling import sample_runs
from decode_mem.io.camera import Camera, PixelMaps

MIN_BLOCK = 3  # frames: a third cumulant needs three samples
LIGHT_FRAMES = 64  # single frames whose pixels give the cumulants, spread evenly over the movie (far apart)
LIGHT_PIXELS = 1 << 16  # pixels of each frame used: squares spread over a larger frame (``spread_pixels``)
LIGHT_BANDS = 4  # ... on a grid of this many bands each way
LIGHT_GROUPS = 4  # interleaved subsets of those frames, whose spread gives the standard errors (1, 2 or 4)


def third_per_photon(camera: Camera) -> float:
    """The noise's third cumulant per photon of light, in photons³ per photon (see the module docstring)."""
    return (6.0 if camera.kind == "emccd" else 1.0) / camera.qe**2


@dataclass(frozen=True)
class LightCumulants:
    """Pooled over pixels and blocks: ``mean`` light (photons/px/frame) and the second and third cumulants of the
    emitters' light beyond the camera's noise (``variance``, photons²; ``third``, photons³), with their standard
    errors over blocks (None with one block)."""

    mean: float
    variance: float
    third: float
    variance_se: float | None
    third_se: float | None


def spread_pixels(h: int, w: int, pixels: int = LIGHT_PIXELS) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of ``LIGHT_BANDS`` bands each way, spread evenly over an ``(h, w)`` frame, whose crossings
    hold at most ``pixels`` pixels (all rows or columns of a frame too small for them): squares over the whole field,
    so that a sample off the centre counts too."""
    side = max(1, math.isqrt(pixels // LIGHT_BANDS**2))

    def bands(n: int) -> np.ndarray:
        if n <= LIGHT_BANDS * side:
            return np.arange(n)
        starts = np.round((np.arange(LIGHT_BANDS) + 0.5) * n / LIGHT_BANDS - side / 2).astype(np.int64)
        return (np.clip(starts, 0, n - side)[:, None] + np.arange(side)).ravel()

    return bands(h), bands(w)


def light_cumulants(stack: Any, camera: Camera, *, frames: int = LIGHT_FRAMES,
                    pixels: int = LIGHT_PIXELS) -> LightCumulants | None:
    """``LightCumulants`` of ``stack`` (a ``(T, H, W)`` stack or array of camera counts) from ``frames`` single frames
    spread over it (``sampling.sample_runs`` with runs of one), the pixels of ``spread_pixels`` of each, each frame
    taken about its own mean level; the per-pixel k-statistics over those frames, pooled over pixels, less the
    camera's noise (its per-pixel maps where it has them). Frames whose pixels are all equal (blank, or repaired
    flat by the reader) are left out. None with fewer than ``MIN_BLOCK`` frames left. Memory: a few arrays of
    ``pixels``; each frame is read once."""
    n, h, w = (int(v) for v in stack.shape)
    rows, cols = spread_pixels(h, w, pixels)
    cut = np.ix_(rows, cols)
    maps = camera.load_maps((h, w))
    if maps is not None:
        maps = PixelMaps(maps.baseline[cut], maps.e_per_adu[cut], maps.read_noise[cut])
    taken = 0  # frames used (blank and flat ones are not)
    sums = np.zeros((LIGHT_GROUPS, 3, len(rows), len(cols)))  # per pixel: sums of x, x², x³
    count, level = np.zeros(LIGHT_GROUPS), np.zeros(LIGHT_GROUPS)
    for t0, _ in sample_runs(n, frames, run=1):
        adu = np.asarray(stack[int(t0)], dtype=np.float32)[cut]
        if adu.size == 0 or adu.min() == adu.max():
            continue
        photons = np.asarray(camera.to_photons(adu, maps), dtype=np.float64)
        g = taken % LIGHT_GROUPS
        taken += 1
        mean = float(photons.mean())
        x = photons - mean
        square = x * x
        sums[g, 0] += x
        sums[g, 1] += square
        sums[g, 2] += square * x
        count[g] += 1
        level[g] += mean
    # frames went round-robin into the groups; too few for all of them: pairs, or all, pooled (each >= MIN_BLOCK)
    groups = next((g for g in (LIGHT_GROUPS, 2, 1) if taken >= g * MIN_BLOCK), 0)
    if groups < 1:
        return None
    if groups < LIGHT_GROUPS:
        sums = np.stack([sums[g::groups].sum(axis=0) for g in range(groups)])
        count = np.array([count[g::groups].sum() for g in range(groups)])
        level = np.array([level[g::groups].sum() for g in range(groups)])
    read_var = read_variance(camera, maps)
    k2, k3, mean = np.zeros(groups), np.zeros(groups), level / count
    for g in range(groups):
        c = count[g]
        m = sums[g, 0] / c
        m2 = sums[g, 1] - c * m * m  # central sums per pixel
        m3 = sums[g, 2] - 3 * m * sums[g, 1] + 2 * c * m**3
        k2[g] = float(np.mean(m2)) / (c - 1)
        k3[g] = float(np.mean(m3)) * c / ((c - 1) * (c - 2))
    excess2 = k2 - (expected_slope(camera) * mean + read_var)
    excess3 = k3 - third_per_photon(camera) * mean
    return _pooled(count, mean, excess2, excess3)


def _pooled(n: np.ndarray, mean: np.ndarray, excess2: np.ndarray, excess3: np.ndarray) -> LightCumulants:
    """The groups' cumulants pooled (weights ``n - 2``), with their standard errors over groups (None with one)."""
    w = n - 2

    def pooled(v: np.ndarray) -> tuple[float, float | None]:
        m = float(np.sum(w * v) / np.sum(w))
        if len(v) < 2:
            return m, None
        return m, float(math.sqrt(np.sum(w * (v - m) ** 2) / np.sum(w) / (len(v) - 1)))

    (var, var_se), (third, third_se) = pooled(excess2), pooled(excess3)
    return LightCumulants(float(np.sum(n * mean) / np.sum(n)), var, third, var_se, third_se)
