"""Import a SMAP / DECODE 3D calibration (``3dcal.mat``, ``SXY.cspline``) into the PSF file's spline layout.

Read from MATLAB v5 files with ``scipy.io.loadmat`` and from v7.3 (HDF5) files with ``h5py``. Fields used:
``SXY(1).cspline.coeff`` (Nx−1, Ny−1, Nz−1, 64), ``x0`` (1-based centre in the coefficient grid), ``z0``
(z voxel of the focus), ``dz`` (nm). Conventions, as DECODE reads these files (``SMAPSplineCoefficient`` and its
``spline_psf`` library): the lateral centre is ``x0 − 1`` on both axes, the focal plane is voxel ``z0``, the
coefficient array's first axis is DECODE's x, which is the image's first axis (rows, decode_mem's y), and
coefficient ``16i + 4j + k`` multiplies ``dz^i·d1^j·d0^k`` (d0, d1: fractions along the first and second axis).
decode_mem's layout (``decode_mem.io.psf_file``) puts z first and multiplies ``w^i·v^j·u^k`` (v rows, u columns),
so the import transposes to (z, rows, columns) and swaps the powers j and k.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import ConfigError


def _from_v5(path: Path) -> dict[str, Any]:
    import scipy.io

    mat = scipy.io.loadmat(str(path), struct_as_record=False, squeeze_me=True)
    if "SXY" not in mat:
        raise ConfigError(f"{path}: no SXY variable (not a SMAP 3D calibration)")
    sxy = mat["SXY"]
    if isinstance(sxy, np.ndarray):  # a struct array (several channels / files): the first
        sxy = sxy.flat[0]
    try:
        cs = sxy.cspline
        return {"coeff": np.asarray(cs.coeff), "x0": float(np.ravel(cs.x0)[0]), "z0": float(np.ravel(cs.z0)[0]),
                "dz": float(np.ravel(cs.dz)[0])}
    except AttributeError as e:
        raise ConfigError(f"{path}: SXY has no cspline with coeff, x0, z0 and dz ({e})") from e


def _from_v73(path: Path) -> dict[str, Any]:
    import h5py

    with h5py.File(path, "r") as f:
        if "SXY" not in f:
            raise ConfigError(f"{path}: no SXY variable (not a SMAP 3D calibration)")
        sxy = f["SXY"]
        if isinstance(sxy, h5py.Dataset) and sxy.dtype == h5py.ref_dtype:  # a struct array: the first element
            sxy = f[sxy[()].flat[0]]
        try:
            cs = sxy["cspline"]
            if isinstance(cs, h5py.Dataset) and cs.dtype == h5py.ref_dtype:
                cs = f[cs[()].flat[0]]

            def value(name: str) -> np.ndarray:
                item = cs[name]
                if isinstance(item, h5py.Dataset) and item.dtype == h5py.ref_dtype:
                    item = f[item[()].flat[0]]
                return np.asarray(item[()]).T  # MATLAB (column-major) arrays come reversed through HDF5

            return {"coeff": value("coeff"), "x0": float(np.ravel(value("x0"))[0]),
                    "z0": float(np.ravel(value("z0"))[0]), "dz": float(np.ravel(value("dz"))[0])}
        except KeyError as e:
            raise ConfigError(f"{path}: SXY has no cspline with coeff, x0, z0 and dz ({e})") from e


def read_smap(path: str | os.PathLike) -> dict[str, Any]:
    """``{'coeff', 'x0', 'z0', 'dz'}`` of a SMAP calibration, as stored (MATLAB v5 or v7.3)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: file not found")
    with open(p, "rb") as fh:
        head = fh.read(128)
    if head[:8] == b"\x89HDF\r\n\x1a\n" or (len(head) == 128 and b"MATLAB 7.3" in head):
        raw = _from_v73(p)
    elif head[:6] == b"MATLAB":
        try:
            raw = _from_v5(p)
        except NotImplementedError:  # scipy refuses v7.3 files
            raw = _from_v73(p)
    else:
        raise ConfigError(f"{p}: not a MATLAB .mat file")
    coeff = raw["coeff"]
    if coeff.ndim != 4 or coeff.shape[-1] != 64:
        raise ConfigError(f"{p}: SXY.cspline.coeff must be (Nx-1, Ny-1, Nz-1, 64), got shape {coeff.shape}")
    if not raw["dz"] > 0:
        raise ConfigError(f"{p}: SXY.cspline.dz must be > 0 nm, got {raw['dz']}")
    return raw


def smap_to_layout(coeff: np.ndarray) -> np.ndarray:
    """SMAP (rows, columns, z, 64: dz^i·d_col^j·d_row^k) -> decode_mem (z, rows, columns, 64: w^i·v^j·u^k)."""
    c = np.asarray(coeff, dtype=np.float32)
    r, cl, z = c.shape[:3]
    c = c.reshape(r, cl, z, 4, 4, 4).transpose(2, 0, 1, 3, 5, 4)
    return np.ascontiguousarray(c.reshape(z, r, cl, 64))


def layout_to_smap(coeff: np.ndarray) -> np.ndarray:
    """The inverse of ``smap_to_layout`` (for writing SMAP-format files, e.g. in tests)."""
    c = np.asarray(coeff, dtype=np.float32)
    z, r, cl = c.shape[:3]
    c = c.reshape(z, r, cl, 4, 4, 4).transpose(1, 2, 0, 3, 5, 4)
    return np.ascontiguousarray(c.reshape(r, cl, z, 64))
