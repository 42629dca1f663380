"""The light of the emitters in a movie's pixels, beyond the camera's noise: the pixels' second and third cumulants.

Each pixel's value over time is its background plus the light of the emitters around it plus the camera's noise.
Over the frames of a block (a background constant in time) the second and third cumulants of the value are those
of the emitters' light plus those of the noise, which the camera settings predict from the mean light (in photons
per photon: ``slope`` = F²/qe for the variance, as the camera check; ``third_per_photon`` for the third cumulant:
an EMCCD's register multiplies each electron by an exponential gain, 6/qe²; a Poisson count, 1/qe²). What is
left, pooled over pixels, is what Campbell's theorem relates to the density, the photons and the PSF
(``calibrate.crowding``): it needs no spot to be found, and so holds where spots overlap or spread too much to be
counted (dense and 3-D movies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from decode_mem.calibrate.camera_check import expected_slope, read_variance
from decode_mem.io.camera import Camera

MIN_BLOCK = 3  # frames: a third cumulant needs three samples


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


class CumulantStats:
    """Running per-block sums for ``LightCumulants``: each block's per-pixel unbiased second and third cumulants
    (k-statistics, about the block's own mean: a background that changes slowly over the movie does not count),
    averaged over the block's pixels."""

    def __init__(self) -> None:
        self.blocks: list[tuple[int, float, float, float]] = []  # (frames, mean, k2, k3) per block

    def add(self, photons: np.ndarray) -> None:
        """Add a block (n, H, W) of consecutive frames in photons (blocks of fewer than ``MIN_BLOCK`` are skipped).
        Frame by frame about the block's mean: the temporaries are a frame's size, whatever the block's."""
        n = len(photons)
        if n < MIN_BLOCK:
            return
        mean = np.mean(photons, axis=0, dtype=np.float64)
        m2, m3 = np.zeros_like(mean), np.zeros_like(mean)
        for frame in photons:
            dev = np.asarray(frame, dtype=np.float64) - mean
            square = dev * dev
            m2 += square
            m3 += square * dev
        k2 = float(np.mean(m2)) / (n - 1)
        k3 = float(np.mean(m3)) * n / ((n - 1) * (n - 2))
        self.blocks.append((n, float(mean.mean()), k2, k3))

    def result(self, camera: Camera) -> LightCumulants | None:
        """The pooled cumulants less the camera's noise (None without a block of ``MIN_BLOCK`` frames)."""
        if not self.blocks:
            return None
        n, mean, k2, k3 = (np.asarray(v, dtype=np.float64) for v in zip(*self.blocks, strict=True))
        excess2 = k2 - (expected_slope(camera) * mean + read_variance(camera))
        excess3 = k3 - third_per_photon(camera) * mean
        w = n - 2

        def pooled(v: np.ndarray) -> tuple[float, float | None]:
            m = float(np.sum(w * v) / np.sum(w))
            if len(v) < 2:
                return m, None
            return m, float(math.sqrt(np.sum(w * (v - m) ** 2) / np.sum(w) / (len(v) - 1)))

        (var, var_se), (third, third_se) = pooled(excess2), pooled(excess3)
        return LightCumulants(float(np.sum(n * mean) / np.sum(n)), var, third, var_se, third_se)
