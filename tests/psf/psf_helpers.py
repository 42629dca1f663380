"""Analytic PSFs for the PSF tests: pixel-integrated astigmatic Gaussians, sampled as a spline would be."""

from __future__ import annotations

import numpy as np
from scipy.special import erf

from decode_mem.simulate.config import AstigmatismCalibration

CAL = AstigmatismCalibration(focal_offset=(250.0, -250.0), depth=(280.0, 280.0), cubic=(0.1, -0.1))


def sigmas(z: np.ndarray, sigma0: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    sx, sy = CAL.sigma_scale(z)
    return sigma0 * sx, sigma0 * sy


def pixel_gauss(d: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Fraction of a 1D Gaussian (σ ``s``) in the pixel centred at offset ``d`` from its centre."""
    return 0.5 * (erf((d + 0.5) / (np.sqrt(2) * s)) - erf((d - 0.5) / (np.sqrt(2) * s)))


def analytic_volume(z: np.ndarray, half: int, upsample: int = 1) -> np.ndarray:
    """(len(z), 2·half+1, 2·half+1): the pixel values of an emitter at each node's offset (node/upsample px)."""
    sx, sy = sigmas(np.asarray(z, np.float64))
    off = (np.arange(2 * half + 1) - half) / upsample
    return pixel_gauss(off[None, :, None], sy[:, None, None]) * pixel_gauss(off[None, None, :], sx[:, None, None])


def analytic_patches(x: np.ndarray, y: np.ndarray, z: np.ndarray, size: int) -> np.ndarray:
    """(N, size, size) pixel values of emitters at (x, y, z) on patches starting at round(x) − size//2."""
    sx, sy = sigmas(z)
    half = size // 2
    cols = np.round(x)[:, None] - half + np.arange(size)
    rows = np.round(y)[:, None] - half + np.arange(size)
    ex = pixel_gauss(cols - x[:, None], sx[:, None])
    ey = pixel_gauss(rows - y[:, None], sy[:, None])
    return ey[:, :, None] * ex[:, None, :]
