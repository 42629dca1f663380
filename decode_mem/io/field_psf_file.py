"""The field-dependent part of a PSF file: how the PSF changes across the camera's field (``psf.h5``, group ``field``).

A field-dependent PSF file is an ordinary PSF file (``decode_mem.io.psf_file``: its root spline is the PSF at the
field's centre, so every reader of a single PSF still reads it) with a group ``field`` that holds, as sampled
volumes on the spline's nodes (the spline coefficients are computed when it is read: ~64x smaller files):

- ``mean`` float32 (Nz, Ny, Nx): the beads' average shape after each bead was moved to the same focus;
- ``components`` float32 (K, Nz, Ny, Nx): how the shape varies between beads (principal components, K >= 0);
- ``bead_xy`` float64 (B, 2): the beads' positions in the field, px (x = column, y = row, pixel centres at
  integers); ``bead_weights`` (B, K): each bead's share of every component; ``bead_shift`` (B,): each bead's
  focal shift, nm (its PSF at z is the shape at ``z − shift``);
- attributes ``field_shape`` (H, W) px, ``x0``, ``y0``, ``z0``, ``dz``, ``upsample``, ``z_range`` (valid z over the
  whole field, nm), ``pixel_size``, ``shape_range`` (z of the shape's valid planes, nm) and ``version``.

The PSF at a field position (x, y): ``mean + Σ_k w_k(x, y)·components[k]`` taken at ``z − shift(x, y)``, with
``w_k`` and ``shift`` interpolated over the beads by thin-plate splines (exact at the beads;
``decode_mem.simulate.field_spline``). A file without the group is a single PSF (``read_field_psf`` gives None).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import ConfigError, exception_line
from decode_mem.io.atomic import atomic_output
from decode_mem.io.psf_file import SplineData, checked_dataset, psf_header, write_psf

GROUP = "field"
FIELD_VERSION = 1
_NUMBERS = ("x0", "y0", "z0", "dz", "pixel_size")


@dataclass(frozen=True)
class FieldPsfData:
    """A field-dependent PSF as sampled volumes and per-bead values (module docstring); ``info``: how it was
    chosen (leave-one-bead-out errors, components), plain values for reports."""

    field_shape: tuple[int, int]
    mean: np.ndarray
    components: np.ndarray
    bead_xy: np.ndarray
    bead_weights: np.ndarray
    bead_shift: np.ndarray
    x0: float
    y0: float
    z0: float
    dz: float
    upsample: int
    z_range: tuple[float, float]
    shape_range: tuple[float, float]
    pixel_size: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        mean = np.asarray(self.mean, np.float32)
        comps = np.asarray(self.components, np.float32)
        xy = np.asarray(self.bead_xy, np.float64)
        weights = np.asarray(self.bead_weights, np.float64)
        shift = np.asarray(self.bead_shift, np.float64)
        if mean.ndim != 3 or min(mean.shape) < 2:
            raise ConfigError(f"field PSF: mean must be a (Nz, Ny, Nx) volume, got shape {mean.shape}")
        if comps.ndim != 4 or comps.shape[1:] != mean.shape:
            raise ConfigError(f"field PSF: components must be (K, {', '.join(map(str, mean.shape))}), got shape "
                              f"{comps.shape}")
        b, k = len(xy), comps.shape[0]
        if xy.shape != (b, 2) or weights.shape != (b, k) or shift.shape != (b,) or b < 3:
            raise ConfigError(f"field PSF: need (B, 2) bead positions, (B, {k}) weights and (B,) shifts with B >= 3, "
                              f"got {xy.shape}, {weights.shape}, {shift.shape}")
        for name, a in (("mean", mean), ("components", comps), ("bead_xy", xy), ("bead_weights", weights),
                        ("bead_shift", shift)):
            if not np.isfinite(a).all():
                raise ConfigError(f"field PSF: {name} contains NaN or infinity")
        shape = tuple(int(v) for v in np.asarray(self.field_shape).ravel())
        if len(shape) != 2 or min(shape) < 1:
            raise ConfigError(f"field PSF: field_shape must be (H, W) px, got {self.field_shape!r}")
        for name in _NUMBERS:
            v = getattr(self, name)
            if not np.isfinite(float(v)):
                raise ConfigError(f"field PSF: {name} must be a finite number, got {v!r}")
        if not float(self.dz) > 0 or int(self.upsample) < 1:
            raise ConfigError(f"field PSF: dz must be > 0 and upsample >= 1, got {self.dz!r}, {self.upsample!r}")
        for name in ("z_range", "shape_range"):
            lo, hi = (float(v) for v in getattr(self, name))
            if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
                raise ConfigError(f"field PSF: {name} must be (low, high) nm, got {getattr(self, name)!r}")
            object.__setattr__(self, name, (lo, hi))
        for name, value in (("mean", mean), ("components", comps), ("bead_xy", xy), ("bead_weights", weights),
                            ("bead_shift", shift), ("field_shape", shape), ("upsample", int(self.upsample))):
            object.__setattr__(self, name, value)
        for name in _NUMBERS:
            object.__setattr__(self, name, float(getattr(self, name)))

    @property
    def n_components(self) -> int:
        return int(self.components.shape[0])

    def as_meta(self) -> dict[str, Any]:
        """Plain values and arrays (a checkpoint's metadata; ``from_meta`` reads them back)."""
        import torch

        out: dict[str, Any] = {n: getattr(self, n) for n in (*_NUMBERS, "upsample")}
        out.update(field_shape=list(self.field_shape), z_range=list(self.z_range), shape_range=list(self.shape_range),
                   mean=torch.from_numpy(self.mean.copy()), components=torch.from_numpy(self.components.copy()),
                   bead_xy=self.bead_xy.tolist(), bead_weights=self.bead_weights.tolist(),
                   bead_shift=self.bead_shift.tolist())
        return out

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> FieldPsfData:
        def array(v: Any) -> np.ndarray:
            return v.numpy() if hasattr(v, "numpy") else np.asarray(v, np.float64)

        k = len(array(meta["components"]))
        weights = array(meta["bead_weights"]).reshape(-1, k)
        return cls(field_shape=tuple(meta["field_shape"]), mean=array(meta["mean"]),
                   components=array(meta["components"]), bead_xy=array(meta["bead_xy"]), bead_weights=weights,
                   bead_shift=array(meta["bead_shift"]), z_range=tuple(meta["z_range"]),
                   shape_range=tuple(meta["shape_range"]), upsample=int(meta["upsample"]),
                   **{n: float(meta[n]) for n in _NUMBERS})


def write_field_psf(path: str | os.PathLike, centre: SplineData, data: FieldPsfData) -> None:
    """Write the PSF at the field's centre (the root spline, for single-PSF readers) and ``data`` atomically."""
    import h5py

    with atomic_output(path) as tmp:
        write_psf(tmp, centre)
        with h5py.File(tmp, "a") as f:
            g = f.create_group(GROUP)
            for name in ("mean", "components"):
                g.create_dataset(name, data=getattr(data, name), compression="gzip", compression_opts=4)
            for name in ("bead_xy", "bead_weights", "bead_shift"):
                g.create_dataset(name, data=getattr(data, name))
            g.attrs.update({n: getattr(data, n) for n in _NUMBERS})
            g.attrs.update(version=FIELD_VERSION, upsample=data.upsample, field_shape=np.asarray(data.field_shape),
                           z_range=np.asarray(data.z_range), shape_range=np.asarray(data.shape_range))
            for key, value in data.info.items():  # plain numbers and strings only: how it was chosen
                if isinstance(value, (int, float, str)):
                    g.attrs[f"info_{key}"] = value


def is_field_psf(path: str | os.PathLike) -> bool:
    """Whether the PSF file ``path`` varies over the field (has the ``field`` group); a bad file is a ConfigError."""
    import h5py

    p = Path(path)
    psf_header(p)  # missing, foreign or damaged: its ConfigError names the file
    with h5py.File(p, "r") as f:
        return GROUP in f


def field_header(path: str | os.PathLike) -> dict[str, Any] | None:
    """The field part's attributes (``field_shape``, ``z_range``, ...), without the volumes; None for a single PSF."""
    import h5py

    p = Path(path)
    if not is_field_psf(p):
        return None
    with h5py.File(p, "r") as f:
        g = f[GROUP]
        out = _attrs(g, p)
        out["components"] = int(_dataset(g, "components", p, 4).shape[0])
        out["beads"] = int(_dataset(g, "bead_xy", p, 2).shape[0])
        out["info"] = {k[5:]: (v.item() if hasattr(v, "item") else v) for k, v in g.attrs.items()
                       if k.startswith("info_")}
        return out


def read_field_psf(path: str | os.PathLike) -> FieldPsfData | None:
    """The field-dependent part of a PSF file, or None where the file holds a single PSF; a damaged group is a
    ConfigError naming the file."""
    import h5py

    p = Path(path)
    if not is_field_psf(p):
        return None
    try:
        with h5py.File(p, "r") as f:
            g = f[GROUP]
            head = _attrs(g, p)
            arrays = {n: _dataset(g, n, p, nd)[()] for n, nd in (("mean", 3), ("components", 4), ("bead_xy", 2),
                                                                 ("bead_weights", 2), ("bead_shift", 1))}
            info = {k[5:]: (v.item() if hasattr(v, "item") else v) for k, v in g.attrs.items()
                    if k.startswith("info_")}
    except (OSError, KeyError, ValueError) as e:
        raise ConfigError(f"{p}: cannot read the field-dependent PSF ({exception_line(e, with_type=False)})") \
            from None
    try:
        return FieldPsfData(**arrays, **head, info=info)
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None


def _attrs(g: Any, p: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        for name in _NUMBERS:
            out[name] = float(g.attrs[name])
        out["upsample"] = int(g.attrs["upsample"])
        out["field_shape"] = tuple(int(v) for v in np.asarray(g.attrs["field_shape"]).ravel())
        for name in ("z_range", "shape_range"):
            out[name] = tuple(float(v) for v in np.asarray(g.attrs[name]).ravel())
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{p}: the field-dependent PSF's settings are damaged ({e})") from None
    if len(out["field_shape"]) != 2 or len(out["z_range"]) != 2 or len(out["shape_range"]) != 2:
        raise ConfigError(f"{p}: the field-dependent PSF's field_shape, z_range or shape_range is not a pair")
    return out


def _dataset(g: Any, name: str, p: Path, ndim: int) -> Any:
    return checked_dataset(g, name, p, ndim, what="the field-dependent PSF")
