"""From a sampled PSF volume to cubic-spline coefficients in the SMAP/DECODE cspline layout (and SplineData).

The volume (Nz, Ny, Nx) is interpolated by a C² cubic B-spline (``scipy.ndimage.spline_filter``, mirror
boundaries), and each voxel's B-spline weights are expanded into the 64 monomial coefficients that
``decode_mem.simulate.spline`` evaluates: in one voxel along one axis the spline is
``Σ_a c[i−1+a]·B_a(t)``, ``B_a`` the four cubic B-spline pieces, so the coefficient of ``t^p`` is
``Σ_a M[p, a]·c[i−1+a]`` with the fixed matrix ``M`` below; the three axes multiply.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from decode_mem.io.psf_file import SplineData

# t^p coefficient (rows p = 0..3) of the B-spline pieces weighting c[i-1], c[i], c[i+1], c[i+2] (columns)
_M = np.array([[1.0, 4.0, 1.0, 0.0],
               [-3.0, 0.0, 3.0, 0.0],
               [3.0, -6.0, 3.0, 0.0],
               [-1.0, 3.0, -3.0, 1.0]]) / 6.0


def _expand_axis(c: np.ndarray, axis: int) -> np.ndarray:
    """``c`` padded by one on ``axis`` (length n + 2) -> the 4 polynomial coefficients per interval, stacked
    on a new last axis: length n − 1 on ``axis``."""
    n = c.shape[axis] - 3  # intervals
    pieces = [np.take(c, np.arange(a, a + n), axis=axis) for a in range(4)]
    return np.stack([sum(_M[p, a] * pieces[a] for a in range(4)) for p in range(4)], axis=-1)


def spline_coefficients(volume: np.ndarray) -> np.ndarray:
    """Cubic-spline coefficients (Nz−1, Ny−1, Nx−1, 64) interpolating ``volume`` (Nz, Ny, Nx) at its nodes.

    Coefficient ``16i + 4j + k`` multiplies ``w^i·v^j·u^k`` (z, y, x fractions in the voxel).
    """
    v = np.asarray(volume, dtype=np.float64)
    if v.ndim != 3 or min(v.shape) < 2:
        raise ValueError(f"spline_coefficients: volume must be (Nz, Ny, Nx) with every size >= 2, got {v.shape}")
    c = ndimage.spline_filter(v, order=3, mode="mirror")
    c = np.pad(c, 1, mode="reflect")  # the mirror extension that spline_filter assumed
    out = _expand_axis(c, 0)  # (Nz-1, Ny+2, Nx+2, 4z)
    out = _expand_axis(out, 1)  # (Nz-1, Ny-1, Nx+2, 4z, 4y)
    out = _expand_axis(out, 2)  # (Nz-1, Ny-1, Nx-1, 4z, 4y, 4x)
    return out.reshape(*out.shape[:3], 64).astype(np.float32)


def _gauss1d(pos: np.ndarray, amp: float, mu: float, sigma: float, offset: float) -> np.ndarray:
    return amp * np.exp(-0.5 * ((pos - mu) / sigma) ** 2) + offset


def gauss_widths(volume: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """σx, σy (px) per z plane of a PSF volume (Nz, Ny, Nx): σ of a Gaussian + offset least-squares fitted to the
    plane's column sums (x) and row sums (y). Robust to noise in the tails, unlike second moments; at most half
    the volume's side (a PSF wider than its volume has no measurable width)."""
    from scipy.optimize import curve_fit

    v = np.asarray(volume, dtype=np.float64)
    out = np.full((2, v.shape[0]), np.nan)
    for a, axis in enumerate((1, 2)):  # profile along x: sum over rows (axis 1); along y: over columns (axis 2)
        prof = v.sum(axis=axis)
        pos = np.arange(prof.shape[1], dtype=np.float64)
        for k, p in enumerate(prof):
            pk = np.clip(p - np.median(p), 0, None)
            total = pk.sum()
            if not total > 0:
                continue
            mu = (pk * pos).sum() / total
            s0 = min(max(np.sqrt((pk * (pos - mu) ** 2).sum() / total), 0.5), pos[-1] / 2 - 1e-6)
            try:
                popt = curve_fit(_gauss1d, pos, p, p0=(p.max() - np.median(p), mu, s0, np.median(p)),
                                 bounds=([0, pos[0], 0.2, -np.inf], [np.inf, pos[-1], pos[-1] / 2, np.inf]))[0]
                out[a, k] = popt[2]
            except (RuntimeError, ValueError):
                out[a, k] = s0
    return out[0], out[1]


def finish_spline(coeff: np.ndarray, *, x0: float, y0: float, z0: float, dz: float, z_range: tuple[float, float],
                  upsample: int, pixel_size: float, source: str) -> SplineData:
    """Scale so that the focal plane's pixels sum to 1 (photons = the flux in the patch at focus) and attach
    σx(z), σy(z) of the node values."""
    nodes = coeff[..., 0].astype(np.float64)  # the spline at the voxel corners: the sampled volume
    nz = nodes.shape[0]
    focus = int(np.clip(round(z0), 0, nz - 1))
    total = nodes[focus].sum() / upsample**2  # a camera pixel covers upsample² nodes
    if not total > 0:
        raise ValueError("the PSF's focal plane sums to <= 0: no PSF to normalise")
    coeff = coeff / total
    sx, sy = gauss_widths(nodes)
    z = (np.arange(nz) - z0) * dz
    return SplineData(coeff=coeff.astype(np.float32), x0=x0, y0=y0, z0=z0, dz=dz, z_range=z_range,
                      pixel_size=pixel_size, source=source, upsample=upsample, width_z=z,
                      width_x=sx / upsample, width_y=sy / upsample)


def spline_from_volume(volume: np.ndarray, *, dz: float, z0: float, upsample: int = 1,
                       z_range: tuple[float, float] | None = None, pixel_size: float = 0.0,
                       source: str = "volume") -> SplineData:
    """A spline interpolating ``volume`` (Nz, Ny, Nx; centred at the middle node laterally; plane ``z0`` at
    z = 0 nm, ``dz`` nm apart; ``upsample`` nodes per camera pixel). ``z_range`` defaults to the planes' span."""
    v = np.asarray(volume, dtype=np.float64)
    nz, ny, nx = v.shape
    if z_range is None:
        z_range = (-z0 * dz, (nz - 1 - z0) * dz)
    return finish_spline(spline_coefficients(v), x0=(nx - 1) / 2, y0=(ny - 1) / 2, z0=z0, dz=dz, z_range=z_range,
                         upsample=upsample, pixel_size=pixel_size, source=source)
