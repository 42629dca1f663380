"""SplineData from a SMAP calibration, normalised and with its width curves (volumes: ``simulate.spline_fit``)."""

from __future__ import annotations

import os
from pathlib import Path

from decode_mem.io.psf_file import SplineData
from decode_mem.psf.smap import read_smap, smap_to_layout
from decode_mem.simulate.spline_fit import finish_spline


def spline_from_smap(path: str | os.PathLike, *, pixel_size: float = 0.0) -> SplineData:
    """Import ``SXY.cspline`` of a SMAP/DECODE ``3dcal.mat`` (see ``decode_mem.psf.smap``); valid over the
    z its voxels cover."""
    raw = read_smap(path)
    coeff = smap_to_layout(raw["coeff"])
    nz = coeff.shape[0]
    x0 = raw["x0"] - 1.0
    z0, dz = raw["z0"], raw["dz"]
    z_range = (-z0 * dz, (nz - z0) * dz)
    return finish_spline(coeff, x0=x0, y0=x0, z0=z0, dz=dz, z_range=z_range, upsample=1, pixel_size=pixel_size,
                         source=f"SMAP calibration {Path(path).name}")
