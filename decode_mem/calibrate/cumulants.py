"""The light of the emitters in a movie's pixels, beyond the camera's noise: the pixels' second and third cumulants.

Each pixel's value over time is its background plus the light of the emitters around it plus the camera's noise.
Over frames far enough apart that an emitter seen in one is not the one seen in another, the second and third
cumulants of a pixel's value are those of the emitters' light plus those of the noise, which the camera settings
predict from the mean light (in photons per photon: ``slope`` = F²/qe for the variance, as the camera check;
``third_per_photon`` for the third cumulant: an EMCCD's register multiplies each electron by an exponential gain,
6/qe²; a Poisson count, 1/qe²). What is left, pooled over pixels, is what Campbell's theorem relates to the
density, the photons and the PSF (``calibrate.crowding``): it needs no spot to be found, and so holds where spots
overlap or spread too much to be counted (dense and 3-D movies).

Why frames spread over the movie (``light_cumulants``): emitters stay on, and come back, for several frames, so
consecutive frames share their light, and about the mean of a few consecutive frames that light is partly in the
mean. The calibration once took the cumulants about blocks of consecutive frames (4 frames for a 1024² movie, at
most 20): on ``tests/calibrate/test_light_cumulants.py``'s movie (on-time 3 frames) blocks of 4 read under 60 % of
the second cumulant and under 30 % of the third that every 10th frame reads, and a 1024² movie's fit was matched to
several times its density. Each frame is taken about its own mean level first, so that a background that fades
over the movie does not count. A movie of a few hundred frames or fewer has no frames far apart: its cumulants
still read low.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from decode_mem.calibrate.camera_check import expected_slope, read_variance
from decode_mem.io.camera import Camera

MIN_BLOCK = 3  # frames: a third cumulant needs three samples
LIGHT_FRAMES = 256  # frames whose pixels give the cumulants, spread evenly over the movie
LIGHT_PIXELS = 1 << 16  # pixels of each frame used: a central square of a larger frame
LIGHT_GROUPS = 4  # interleaved subsets of those frames, whose spread gives the standard errors


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


def spread_frames(n_frames: int, frames: int = LIGHT_FRAMES) -> np.ndarray:
    """``frames`` frame indices spread evenly over a movie of ``n_frames`` (all of them in a shorter movie)."""
    return np.unique(np.linspace(0, n_frames - 1, min(n_frames, frames)).round().astype(np.int64))


def central_square(h: int, w: int, pixels: int = LIGHT_PIXELS) -> tuple[slice, slice]:
    """The rows and columns of the frame's central square of at most ``pixels`` pixels (the whole of a smaller
    frame's rows or columns)."""
    side = max(1, math.isqrt(pixels))
    y0, x0 = max(0, (h - side) // 2), max(0, (w - side) // 2)
    return slice(y0, min(h, y0 + side)), slice(x0, min(w, x0 + side))


def light_cumulants(stack: Any, camera: Camera, *, frames: int = LIGHT_FRAMES,
                    pixels: int = LIGHT_PIXELS) -> LightCumulants | None:
    """``LightCumulants`` of ``stack`` (a ``(T, H, W)`` stack or array of camera counts) from ``frames`` frames spread
    over it (``spread_frames``), each cut to its central ``pixels`` (``central_square``) and taken about its own
    mean level; the per-pixel k-statistics over those frames, pooled over pixels, less the camera's noise (its
    per-pixel maps where it has them). None with fewer than ``MIN_BLOCK`` frames. Memory: a few arrays of the
    square's size; each frame is read once."""
    n, h, w = (int(v) for v in stack.shape)
    take = spread_frames(n, frames)
    groups = min(LIGHT_GROUPS, len(take) // MIN_BLOCK)
    if groups < 1:
        return None
    ys, xs = central_square(h, w, pixels)
    maps = camera.load_maps((h, w))
    maps = None if maps is None else maps.crop(ys, xs)
    shape = (ys.stop - ys.start, xs.stop - xs.start)
    sums = np.zeros((groups, 3, *shape))  # per pixel: sums of x, x², x³ (x: photons less the frame's level)
    count, level = np.zeros(groups), np.zeros(groups)
    for i, t in enumerate(take):
        photons = np.asarray(camera.to_photons(np.asarray(stack[int(t), ys, xs], dtype=np.float32), maps),
                             dtype=np.float64)
        g = i % groups
        mean = float(photons.mean())
        x = photons - mean
        square = x * x
        sums[g, 0] += x
        sums[g, 1] += square
        sums[g, 2] += square * x
        count[g] += 1
        level[g] += mean
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
