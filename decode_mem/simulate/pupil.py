"""A scalar pupil-function PSF with aberrations, as a spline: a realistic, non-Gaussian 3-D PSF to simulate with.

The pupil (radius NA/λ in spatial frequency) carries the defocus phase ``2π·z·sqrt((n/λ)² − f²)`` and Zernike
aberrations in waves RMS (``PupilConfig``: vertical astigmatism Z(2,2) — the cylindrical lens —, primary
spherical Z(4,0) and coma Z(3,1); optionally a double-helix phase mask). The intensity ``|FFT(pupil)|²`` is
computed on a grid of pixel/6, integrated over camera pixels (trapezoid rule over the 6 sub-samples) at every
half-pixel offset, and interpolated by the cubic spline (``spline_fit``, 2 nodes per pixel, z every ``dz`` nm).
A Gaussian describes it poorly: its rings and the aberrations' asymmetry are what calibrating with beads is for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scipy import ndimage

from decode_mem.io.psf_file import SplineData
from decode_mem.simulate.spline_fit import spline_from_volume

if TYPE_CHECKING:  # annotations only: config builds pupil splines, so pupil must not import it
    from decode_mem.simulate.config import PupilConfig

_SUB = 3  # sub-samples per half pixel
_GRID = 256


def pupil_volume(pupil: PupilConfig, z: np.ndarray, pixel_size: float, half: int, coma_y: float = 0.0) -> np.ndarray:
    """(len(z), 4·half+1, 4·half+1): pixel values of an emitter at each half-pixel offset within ±half px
    (``coma_y``: waves RMS of Z(3,−1), the coma along y, for PSFs that change over the field)."""
    dx = pixel_size / (2 * _SUB)
    f = np.fft.fftfreq(_GRID, dx)
    fx, fy = np.meshgrid(f, f)
    k = pupil.na / pupil.wavelength
    rho = np.sqrt(fx**2 + fy**2) / k
    theta = np.arctan2(fy, fx)
    inside = rho <= 1.0
    waves = (pupil.astigmatism * np.sqrt(6) * rho**2 * np.cos(2 * theta)
             + pupil.spherical * np.sqrt(5) * (6 * rho**4 - 6 * rho**2 + 1)
             + np.sqrt(8) * (3 * rho**3 - 2 * rho) * (pupil.coma * np.cos(theta) + coma_y * np.sin(theta)))
    if pupil.helix_zones > 0:  # double helix: vortex (2n+1)·θ in the n-th of helix_zones equal-area rings
        zone = np.minimum(np.floor(rho**2 * pupil.helix_zones), pupil.helix_zones - 1)
        waves = waves + (2 * zone + 1) * theta / (2 * np.pi)
    kz = np.sqrt(np.maximum((pupil.n_immersion / pupil.wavelength) ** 2 - fx**2 - fy**2, 0.0))
    taps = np.ones(2 * _SUB + 1)
    taps[[0, -1]] = 0.5
    taps /= taps.sum()
    c = _GRID // 2
    idx = c + _SUB * np.arange(-2 * half, 2 * half + 1)
    out = np.empty((len(z), len(idx), len(idx)))
    for i, zi in enumerate(np.asarray(z, np.float64)):
        field = np.fft.fftshift(np.fft.ifft2(inside * np.exp(2j * np.pi * (waves + zi * kz))))
        intensity = np.abs(field) ** 2
        intensity /= intensity.sum()
        pix = ndimage.convolve1d(ndimage.convolve1d(intensity, taps * 2 * _SUB, axis=0, mode="constant"),
                                 taps * 2 * _SUB, axis=1, mode="constant")
        out[i] = pix[np.ix_(idx, idx)]
    return out


def pupil_spline(pupil: PupilConfig, z_range: tuple[float, float], pixel_size: float, half: int = 12,
                 dz: float = 25.0, coma_y: float = 0.0) -> SplineData:
    """The pupil PSF as a spline valid over ``z_range`` nm (not memoised here: configs share it through
    ``simulate.config._pupil_spline``, keyed alike)."""
    lo = dz * np.floor(z_range[0] / dz) - 2 * dz
    hi = dz * np.ceil(z_range[1] / dz) + 2 * dz
    z = np.arange(lo, hi + dz / 2, dz)
    volume = pupil_volume(pupil, z, pixel_size, half, coma_y)
    return spline_from_volume(volume, dz=dz, z0=float(-lo / dz), upsample=2, z_range=(float(z_range[0]),
                              float(z_range[1])), pixel_size=pixel_size, source=f"pupil model {pupil}")
