"""SplineData from a PSF volume (beads) or from a SMAP calibration, normalised and with its width curves."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from decode_mem.io.psf_file import SplineData
from decode_mem.psf.smap import read_smap, smap_to_layout
from decode_mem.psf.spline_fit import gauss_widths, spline_coefficients


def _finish(coeff: np.ndarray, *, x0: float, y0: float, z0: float, dz: float, z_range: tuple[float, float],
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
    return _finish(spline_coefficients(v), x0=(nx - 1) / 2, y0=(ny - 1) / 2, z0=z0, dz=dz, z_range=z_range,
                   upsample=upsample, pixel_size=pixel_size, source=source)


def spline_from_smap(path: str | os.PathLike, *, pixel_size: float = 0.0) -> SplineData:
    """Import ``SXY.cspline`` of a SMAP/DECODE ``3dcal.mat`` (see ``decode_mem.psf.smap``); valid over the
    z its voxels cover."""
    raw = read_smap(path)
    coeff = smap_to_layout(raw["coeff"])
    nz = coeff.shape[0]
    x0 = raw["x0"] - 1.0
    z0, dz = raw["z0"], raw["dz"]
    z_range = (-z0 * dz, (nz - z0) * dz)
    return _finish(coeff, x0=x0, y0=x0, z0=z0, dz=dz, z_range=z_range, upsample=1, pixel_size=pixel_size,
                   source=f"SMAP calibration {Path(path).name}")
