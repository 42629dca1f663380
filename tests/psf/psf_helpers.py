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


def grid_field_psf(path, field_shape: tuple[int, int], z: np.ndarray, half: int, xs, ys, shift_nm: float,
                   z_range: tuple[float, float], shape_range: tuple[float, float]):
    """A field-dependent PSF file (``write_field_psf``) for tests: the analytic astigmatic volume (``half`` px each
    side, upsample 2) as its mean, its x-gradient as its one component, 3 x 3 beads at ``xs`` x ``ys`` px whose
    weights run -0.3 .. 0.3 and focal shifts -``shift_nm`` .. ``shift_nm``; returns its ``FieldPsfData``."""
    from decode_mem.io.field_psf_file import FieldPsfData, write_field_psf
    from decode_mem.simulate.field_spline import FieldSplinePSF

    mean = analytic_volume(z, half, 2)
    gx, gy = np.meshgrid(np.asarray(xs, float), np.asarray(ys, float))
    data = FieldPsfData(field_shape=field_shape, mean=mean, components=np.gradient(mean, axis=1)[None],
                        bead_xy=np.column_stack([gx.ravel(), gy.ravel()]),
                        bead_weights=np.linspace(-0.3, 0.3, 9)[:, None],
                        bead_shift=np.linspace(-shift_nm, shift_nm, 9), x0=2.0 * half, y0=2.0 * half,
                        z0=float(np.flatnonzero(z == 0)[0]), dz=float(z[1] - z[0]), upsample=2, z_range=z_range,
                        shape_range=shape_range, pixel_size=100.0)
    write_field_psf(path, FieldSplinePSF(data).data, data)
    return data
