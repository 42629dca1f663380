"""A pupil PSF whose aberrations change smoothly across the field: the truth to calibrate and test against.

``FieldAberrations`` (``simulation.pupil_field`` with ``psf: pupil``) says how each aberration changes from the
field's centre (the ``pupil`` settings) to its edges. Field coordinates: ``u``, ``v`` run from −1 at the first
pixel centre to +1 at the last, along x (columns) and y (rows); ``r² = (u² + v²)/2`` is 1 at the corners.

- focal shift (nm): ``defocus_nm·r² + tilt_nm[0]·u + tilt_nm[1]·v`` (field curvature and a tilted focal plane):
  an emitter at z is imaged as the centre's focus would image it at ``z − shift``;
- astigmatism and spherical aberration (waves RMS): the centre's plus ``astigmatism·r²`` and ``spherical·r²``;
- coma (waves RMS): the centre's (along x) plus ``coma·r`` pointing away from the centre
  (``coma·u/√2`` along x, ``coma·v/√2`` along y).

Rendering (``FieldPupilPSF``): pupil PSFs (``simulate.pupil``, as splines) at ``nodes × nodes`` field positions,
blended bilinearly between the four nodes around each emitter, every node taken at the emitter's exact
``z − shift``. The focal shift is exact at every position; the other aberrations vary bilinearly between nodes
a quarter of the field apart (5 nodes), a fine sampling of changes that are quadratic over the whole field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from decode_mem.errors import ConfigError
from decode_mem.io.psf_file import SplineData

if TYPE_CHECKING:
    import torch

NODE_HALF = 9  # px: half-size of each node's spline (its patches are 2·NODE_HALF − 1 px, like a bead region)


@dataclass(frozen=True)
class FieldAberrations:
    """How a pupil PSF changes over the field (module docstring); all zero: the same PSF everywhere."""

    defocus_nm: float = 0.0
    tilt_nm: tuple[float, float] = (0.0, 0.0)
    astigmatism: float = 0.0
    spherical: float = 0.0
    coma: float = 0.0
    nodes: int = 5

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "tilt_nm":
                items = value if isinstance(value, (list, tuple)) else (value, value)
                if len(items) != 2:
                    raise ConfigError(f"simulation.pupil_field.tilt_nm must be two numbers (x, y), got {value!r}")
                value = tuple(_number(v, "tilt_nm") for v in items)
            elif f.name == "nodes":
                if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 2 <= value <= 17:
                    raise ConfigError(f"simulation.pupil_field.nodes must be an integer from 2 to 17, got {value!r}")
                value = int(value)
            else:
                value = _number(value, f.name)
            object.__setattr__(self, f.name, value)

    @classmethod
    def from_dict(cls, params: dict[str, Any] | None) -> FieldAberrations:
        from decode_mem.config import check_keys

        params = dict(params or {})
        check_keys(cls, params, "simulation.pupil_field")
        return cls(**params)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: list(getattr(self, f.name)) if f.name == "tilt_nm" else getattr(self, f.name)
                for f in fields(self)}

    def largest_shift(self) -> float:
        """The largest |focal shift| anywhere on the field or within a tenth of it beyond (nm)."""
        return abs(self.defocus_nm) * 1.21 + 1.1 * (abs(self.tilt_nm[0]) + abs(self.tilt_nm[1]))

    def at(self, u: np.ndarray, v: np.ndarray) -> dict[str, np.ndarray]:
        """The changes at field coordinates ``u``, ``v`` (module docstring): shift (nm), astigmatism, spherical,
        coma_x, coma_y (waves RMS, to add to the centre's)."""
        u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
        r2 = (u * u + v * v) / 2
        k = self.coma / math.sqrt(2)
        return {"shift": self.shift_nm(u, v), "astigmatism": self.astigmatism * r2, "spherical": self.spherical * r2,
                "coma_x": k * u, "coma_y": k * v}

    def shift_nm(self, u: Any, v: Any) -> Any:
        """The focal shift (nm) at field coordinates ``u``, ``v`` (numpy arrays or torch tensors alike)."""
        return self.defocus_nm * (u * u + v * v) / 2 + self.tilt_nm[0] * u + self.tilt_nm[1] * v


def _number(value: Any, name: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"simulation.pupil_field.{name} must be a number, got {value!r}") from e
    if isinstance(value, bool) or not math.isfinite(out):
        raise ConfigError(f"simulation.pupil_field.{name} must be a finite number, got {value!r}")
    return out


def field_uv(x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor, shape: tuple[int, int]):
    """Field coordinates (u, v) in [−1, 1] of pixel positions x (column), y (row) on an (H, W) field."""
    h, w = shape
    return 2 * x / max(w - 1, 1) - 1, 2 * y / max(h - 1, 1) - 1


@lru_cache(maxsize=32)
def _node_spline(pupil: Any, changes: tuple[float, float, float, float], z_range: tuple[float, float],
                 pixel_size: float) -> Any:
    """The SplinePSF of one node: the centre's pupil with the node's astigmatism, spherical and coma changes
    (``changes``), valid over ``z_range`` (shared by every config of the same field)."""
    from dataclasses import replace

    from decode_mem.simulate.pupil import pupil_spline
    from decode_mem.simulate.spline import SplinePSF

    astig, spherical, coma_x, coma_y = changes
    node = replace(pupil, astigmatism=pupil.astigmatism + astig, spherical=pupil.spherical + spherical,
                   coma=pupil.coma + coma_x)
    return SplinePSF(pupil_spline(node, z_range, pixel_size, half=NODE_HALF, coma_y=coma_y))


class FieldPupilPSF:
    """The field-dependent pupil PSF of a config (module docstring) over an (H, W) field."""

    def __init__(self, pupil: Any, aberrations: FieldAberrations, field_shape: tuple[int, int],
                 z_range: tuple[float, float], pixel_size: float) -> None:
        self.pupil, self.aberrations = pupil, aberrations
        self.field_shape = (int(field_shape[0]), int(field_shape[1]))
        reach = aberrations.largest_shift()
        self.node_range = (float(z_range[0]) - reach, float(z_range[1]) + reach)
        self.pixel_size = float(pixel_size)
        n = aberrations.nodes
        self.grid = np.linspace(-1.0, 1.0, n)

    def node(self, i: int, j: int) -> Any:
        """The SplinePSF of node (row i, column j)."""
        c = self.aberrations.at(self.grid[j], self.grid[i])
        changes = tuple(round(float(c[k]), 9) for k in ("astigmatism", "spherical", "coma_x", "coma_y"))
        return _node_spline(self.pupil, changes, self.node_range, self.pixel_size)

    @property
    def data(self) -> SplineData:
        """The spline at the field's centre (or the node nearest it)."""
        n = self.aberrations.nodes
        return self.node(n // 2, n // 2).data

    @property
    def patch_size(self) -> int:
        return self.node(0, 0).patch_size

    def focal_shift(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The focal shift (nm) at field positions x, y px."""
        u, v = field_uv(x.double(), y.double(), self.field_shape)
        return self.aberrations.shift_nm(u, v).float()

    def render_spots(self, canvas: torch.Tensor, frame: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                     z: torch.Tensor, photons: torch.Tensor, width: torch.Tensor | None = None,
                     size: int | None = None, fx: torch.Tensor | None = None,
                     fy: torch.Tensor | None = None) -> torch.Tensor:
        """Add spots into ``canvas`` (T, H, W) in place (``SplinePSF.render_spots``), each emitter blended from
        the four nodes around its field position (``fx``, ``fy``; default ``x``, ``y``) at its ``z − shift``."""
        if frame.numel() == 0:
            return canvas
        fx = x if fx is None else fx
        fy = y if fy is None else fy
        n = self.aberrations.nodes
        u, v = field_uv(fx.double(), fy.double(), self.field_shape)
        gu = ((u.clamp(-1, 1) + 1) / 2 * (n - 1))
        gv = ((v.clamp(-1, 1) + 1) / 2 * (n - 1))
        j0 = gu.floor().clamp(0, n - 2).long()
        i0 = gv.floor().clamp(0, n - 2).long()
        tu, tv = (gu - j0).float(), (gv - i0).float()
        zz = z.float() - self.focal_shift(fx, fy)
        size = self.patch_size if size is None else size
        for di in (0, 1):
            for dj in (0, 1):
                weight = (tv if di else 1 - tv) * (tu if dj else 1 - tu)
                i, j = i0 + di, j0 + dj
                for a in range(n):
                    for b in range(n):
                        pick = ((i == a) & (j == b) & (weight > 0)).nonzero().squeeze(1)
                        if len(pick):
                            self.node(a, b).render_spots(canvas, frame[pick], x[pick], y[pick], zz[pick],
                                                         photons[pick] * weight[pick],
                                                         None if width is None else width[pick], size)
        return canvas
