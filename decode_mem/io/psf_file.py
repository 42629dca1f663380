"""The PSF file (``psf.h5``): a cubic-spline PSF over x, y, z, as ``python -m decode_mem.psf`` writes it.

Layout (HDF5, one group per file, datasets at the root):

- ``coeff`` float32 (Nz−1, Ny−1, Nx−1, 64): per voxel the 64 coefficients of ``Σ c[16i+4j+k]·w^i·v^j·u^k``,
  ``u, v, w`` in [0, 1) the fractional position in the voxel along x (column), y (row) and z;
- attributes ``upsample`` (voxels per camera pixel laterally, 1 like SMAP), ``x0``, ``y0`` (spline coordinate of
  the emitter's centre, in voxels), ``z0``
  (spline coordinate of z = 0 nm, the focal position), ``dz`` (nm per z voxel), ``z_range`` (low, high) nm the
  spline is valid for, ``pixel_size`` (nm, 0 when unknown), ``source`` (how it was made);
- optional ``width_z``, ``width_x``, ``width_y`` (nm, px, px): the PSF's RMS width against z, for plots and for
  the simulator's width bounds.

A spline pixel value is the fraction of the emitter's photons in that camera pixel: the spline samples a
pixelated PSF, as SMAP's cspline does. Rendering an emitter at (x, y, z) puts into pixel (row r, column c) the
spline at ``(x0 + (c − x)·upsample, y0 + (r − y)·upsample, z0 + z/dz)``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import ConfigError, exception_line
from decode_mem.io.atomic import atomic_output

FORMAT = "decode_mem spline psf"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class SplineData:
    """A cubic-spline PSF (see the module docstring for the meaning of every field)."""

    coeff: np.ndarray
    x0: float
    y0: float
    z0: float
    dz: float
    z_range: tuple[float, float]
    pixel_size: float = 0.0
    source: str = ""
    upsample: int = 1
    width_z: np.ndarray | None = None
    width_x: np.ndarray | None = None
    width_y: np.ndarray | None = None

    def __post_init__(self) -> None:
        c = np.asarray(self.coeff)
        if c.ndim != 4 or c.shape[-1] != 64 or min(c.shape[:3]) < 1:
            raise ConfigError(f"spline PSF: coefficients must be (Nz-1, Ny-1, Nx-1, 64), got shape {c.shape}")
        if not np.isfinite(c).all():
            raise ConfigError("spline PSF: coefficients contain NaN or infinity")
        if not _number(self.upsample) or int(self.upsample) != self.upsample or self.upsample < 1:
            raise ConfigError(f"spline PSF: upsample must be a positive integer, got {self.upsample!r}")
        object.__setattr__(self, "upsample", int(self.upsample))
        for name in ("x0", "y0", "z0", "pixel_size"):
            if not _number(getattr(self, name)):
                raise ConfigError(f"spline PSF: {name} must be a finite number, got {getattr(self, name)!r}")
        if not _number(self.dz) or not self.dz > 0:
            raise ConfigError(f"spline PSF: dz must be > 0 nm, got {self.dz!r}")
        if np.shape(self.z_range) != (2,) or not all(_number(v) for v in self.z_range):
            raise ConfigError(f"spline PSF: z_range must be (low, high) nm, got {self.z_range!r}")
        lo, hi = (float(v) for v in self.z_range)
        if not lo <= hi:
            raise ConfigError(f"spline PSF: z_range must be (low, high), got {self.z_range!r}")
        object.__setattr__(self, "coeff", c.astype(np.float32, copy=False))
        object.__setattr__(self, "z_range", (lo, hi))

    @property
    def shape(self) -> tuple[int, int, int]:
        """(Nz−1, Ny−1, Nx−1): voxels of the spline."""
        return tuple(int(v) for v in self.coeff.shape[:3])  # type: ignore[return-value]

    @property
    def domain_z(self) -> tuple[float, float]:
        """(low, high) nm that the spline's voxels cover (the valid ``z_range`` lies inside)."""
        return (-self.z0 * self.dz, (self.shape[0] - self.z0) * self.dz)

    def half_width(self) -> int:
        """The largest h such that a (2h+1)-px patch around an emitter's pixel stays inside the spline."""
        _nz, ny, nx = self.shape
        h = min(self.x0, nx - self.x0, self.y0, ny - self.y0) / self.upsample - 0.5
        return max(0, int(np.floor(h)))


def write_psf(path: str | os.PathLike, psf: SplineData) -> None:
    """Write ``psf`` to ``path`` atomically (``.partial`` then rename)."""
    import h5py

    with atomic_output(path) as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("coeff", data=psf.coeff)
        f.attrs.update({"format": FORMAT, "version": FORMAT_VERSION, "x0": psf.x0, "y0": psf.y0, "z0": psf.z0,
                        "dz": psf.dz, "z_range": np.asarray(psf.z_range, np.float64),
                        "pixel_size": psf.pixel_size, "source": psf.source, "upsample": psf.upsample})
        for name in ("width_z", "width_x", "width_y"):
            value = getattr(psf, name)
            if value is not None:
                f.create_dataset(name, data=np.asarray(value, np.float64))


def read_psf(path: str | os.PathLike) -> SplineData:
    """Read a PSF file; a missing, unreadable or foreign file is a ConfigError naming it."""
    p = Path(path)
    with _open_psf(p) as f:
        head = _header(f, p)
        widths = {n: _dataset(f, n, p, 1) if n in f else None for n in ("width_z", "width_x", "width_y")}
        try:
            return SplineData(coeff=_dataset(f, "coeff", p, 4), x0=head["x0"], y0=head["y0"], z0=head["z0"],
                              dz=head["dz"], z_range=head["z_range"], pixel_size=head["pixel_size"],
                              source=str(f.attrs.get("source", "")), upsample=head["upsample"], **widths)
        except ConfigError as e:  # SplineData's own checks: name the file
            raise ConfigError(f"{p}: {e}") from e


def psf_header(path: str | os.PathLike) -> dict:
    """The cheap part of a PSF file (no coefficients): shape, x0, y0, z0, dz, z_range, pixel_size and
    ``widths`` (z nm, σx px, σy px) when stored."""
    p = Path(path)
    with _open_psf(p) as f:
        out = _header(f, p)
        out["shape"] = tuple(int(v) for v in checked_dataset(f, "coeff", p, 4).shape[:3])
        if "width_x" in f:
            out["widths"] = tuple(_dataset(f, n, p, 1) for n in ("width_z", "width_x", "width_y"))
        return out


def _header(f: Any, p: Path) -> dict:
    """The PSF file's numbers (attributes), each checked to be what it must be; a ConfigError naming the file."""
    out: dict[str, Any] = {}
    for name, default in (("x0", None), ("y0", None), ("z0", None), ("dz", None), ("pixel_size", 0.0),
                          ("upsample", 1)):
        value = f.attrs.get(name, default)
        if value is None:
            raise ConfigError(f"{p}: the PSF file has no '{name}'")
        if not _number(value):
            raise ConfigError(f"{p}: the PSF file's {name} must be a finite number, got {value!r}")
        out[name] = float(value)
    if out["upsample"] != int(out["upsample"]) or out["upsample"] < 1:
        raise ConfigError(f"{p}: the PSF file's upsample must be a positive integer, got {out['upsample']!r}")
    out["upsample"] = int(out["upsample"])
    z_range = f.attrs.get("z_range")
    if z_range is None or np.shape(z_range) != (2,) or not all(_number(v) for v in z_range):
        raise ConfigError(f"{p}: the PSF file's z_range must be two finite numbers (low, high nm), got {z_range!r}")
    out["z_range"] = tuple(float(v) for v in z_range)
    return out


def checked_dataset(f: Any, name: str, p: Path, ndim: int, what: str = "the PSF file") -> Any:
    """Dataset ``name`` of group ``f``: ``ndim``-D numbers, no larger than the file can hold (an edited header
    claiming more is refused before anything is allocated); a ConfigError naming the file and ``what`` it is."""
    import h5py

    ds = f.get(name)
    if not isinstance(ds, h5py.Dataset):
        raise ConfigError(f"{p}: {what} has no '{name}' dataset")
    if ds.ndim != ndim or ds.dtype.kind not in "iuf":
        raise ConfigError(f"{p}: {what}'s '{name}' must be a {ndim}-D array of numbers, got shape {ds.shape} "
                          f"of {ds.dtype}")
    size = p.stat().st_size
    if ds.compression is None and ds.size * ds.dtype.itemsize > size:
        raise ConfigError(f"{p}: {what}'s '{name}' claims {ds.size * ds.dtype.itemsize} bytes, the file has "
                          f"{size}")
    return ds


def _dataset(f: Any, name: str, p: Path, ndim: int) -> np.ndarray:
    """Dataset ``name`` read (``checked_dataset``); a ConfigError naming the file where HDF5 cannot read it."""
    ds = checked_dataset(f, name, p, ndim)
    try:
        return ds[()]
    except (OSError, ValueError) as e:
        raise ConfigError(f"{p}: the PSF file's '{name}' cannot be read ({e})") from None


def _number(value: Any) -> bool:
    """A finite real number (a scalar of any numeric type; not a bool, a string or an array)."""
    v = np.asarray(value)
    return v.shape == () and v.dtype.kind in "iuf" and bool(np.isfinite(v))


@contextmanager
def _open_psf(p: Path) -> Iterator[Any]:
    """An open decode_mem PSF file (h5py.File); missing, foreign or unreadable (also inside the ``with``) is a
    ConfigError naming it. Shared by ``read_psf`` and ``psf_header``."""
    import h5py

    if not p.is_file():
        raise ConfigError(f"{p}: PSF file not found")
    try:
        with h5py.File(p, "r") as f:
            fmt = f.attrs.get("format")
            if not isinstance(fmt, (str, bytes)) or (fmt.decode(errors="replace") if isinstance(fmt, bytes)
                                                      else fmt) != FORMAT:
                raise ConfigError(f"{p}: not a decode_mem PSF file (make one with python -m decode_mem.psf)")
            yield f
    except ConfigError:
        raise
    except (OSError, KeyError, RuntimeError, ValueError) as e:  # h5py: a damaged file, object header, attribute
        # or datatype (ValueError: a float type no numpy dtype represents)
        raise ConfigError(f"{p}: cannot read the PSF file ({exception_line(e, with_type=False)})") from e
