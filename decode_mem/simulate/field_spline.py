"""A PSF that changes across the field, calibrated from beads (``io.field_psf_file``), rendered per emitter.

The PSF at field position (x, y) px is ``mean + Σ_k w_k(x, y)·component_k``, taken at ``z − shift(x, y)``: the
beads' average shape, how it varies between beads (principal components) and each position's focal shift. The
weights and the shift are interpolated over the beads by thin-plate splines (``ThinPlate``: exact at every bead,
smooth between them, linear beyond them), clamped to the beads' own range widened by ``EXTRAPOLATE`` of its
span (far from every bead a spline's linear part must not run away). Rendering is linear in the spline
coefficients, so an emitter's patch is the sum of the mean's and the components' patches, weighted
(``SplinePSF.patches`` of each, one shared geometry).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from decode_mem.io.field_psf_file import FieldPsfData
from decode_mem.io.psf_file import SplineData
from decode_mem.simulate.spline import SplinePSF, scatter_patches
from decode_mem.simulate.spline_fit import gauss_widths, spline_coefficients

EXTRAPOLATE = 0.25  # interpolated weights and shifts stay within the beads' range widened by this share of it
_CHUNK = 1 << 14  # emitters per rendering chunk


def _kernel(r2: np.ndarray | torch.Tensor):
    """The thin-plate kernel r²·log r, written in r² (0 at r = 0)."""
    if isinstance(r2, torch.Tensor):
        return torch.where(r2 > 0, 0.5 * r2 * torch.log(r2.clamp_min(1e-300)), torch.zeros_like(r2))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(r2 > 0, 0.5 * r2 * np.log(np.where(r2 > 0, r2, 1.0)), 0.0)


@dataclass(frozen=True)
class ThinPlate:
    """Thin-plate spline interpolation of values (B, M) at points (B, 2) px: exact at the points.

    Points are scaled by ``scale`` px (the field's larger side) for a well-conditioned system. Needs >= 3
    points not on one line (a ValueError otherwise).
    """

    points: np.ndarray
    values: np.ndarray
    scale: float

    @cached_property
    def _solution(self) -> tuple[np.ndarray, np.ndarray]:
        p = np.asarray(self.points, np.float64) / self.scale
        v = np.asarray(self.values, np.float64).reshape(len(p), -1)
        b = len(p)
        poly = np.column_stack([np.ones(b), p])
        if b < 3 or np.linalg.matrix_rank(poly) < 3:
            raise ValueError("thin-plate interpolation needs at least 3 points not on one line")
        r2 = ((p[:, None, :] - p[None, :, :]) ** 2).sum(-1)
        system = np.zeros((b + 3, b + 3))
        system[:b, :b] = _kernel(r2)
        system[:b, b:] = poly
        system[b:, :b] = poly.T
        rhs = np.zeros((b + 3, v.shape[1]))
        rhs[:b] = v
        sol = np.linalg.solve(system, rhs)
        return sol[:b], sol[b:]

    def __call__(self, xy: np.ndarray) -> np.ndarray:
        """Values (N, M) at points (N, 2) px (numpy, float64)."""
        a, c = self._solution
        q = np.asarray(xy, np.float64).reshape(-1, 2) / self.scale
        p = np.asarray(self.points, np.float64) / self.scale
        r2 = ((q[:, None, :] - p[None, :, :]) ** 2).sum(-1)
        return _kernel(r2) @ a + c[0] + q @ c[1:]

    def torch_at(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Values (N, M) at x, y (N,) px, in float64 on their device."""
        a, c = (torch.as_tensor(v, dtype=torch.float64, device=x.device) for v in self._solution)
        p = torch.as_tensor(self.points, dtype=torch.float64, device=x.device) / self.scale
        q = torch.stack([x.double(), y.double()], dim=1) / self.scale
        r2 = ((q[:, None, :] - p[None, :, :]) ** 2).sum(-1)
        return _kernel(r2) @ a + c[0] + q @ c[1:]


def widened_range(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The range interpolated values stay in: each column's range over the beads (``values`` (B, M)) widened by
    ``EXTRAPOLATE`` of its span on both sides."""
    lo, hi = values.min(axis=0), values.max(axis=0)
    return lo - EXTRAPOLATE * (hi - lo), hi + EXTRAPOLATE * (hi - lo)


def clamped_thin_plate(points: np.ndarray, values: np.ndarray, scale: float, at: np.ndarray) -> np.ndarray:
    """``ThinPlate`` through ``values`` (B, M) at ``points`` (B, 2) px, evaluated at ``at`` (N, 2) px and clamped to
    their ``widened_range``: the interpolation of a field PSF's weights and shifts (module docstring)."""
    values = np.asarray(values, np.float64).reshape(len(points), -1)
    return np.clip(ThinPlate(points, values, scale)(at), *widened_range(values))


class FieldSplinePSF:
    """A field-dependent spline PSF (module docstring), on the CPU; ``render_spots`` as ``SplinePSF``'s with the
    emitters' field positions; ``at(x, y)`` the single spline at one position."""

    def __init__(self, data: FieldPsfData, centre: SplineData | None = None) -> None:
        self.field = data
        self.field_shape = data.field_shape
        geometry = dict(x0=data.x0, y0=data.y0, z0=data.z0, dz=data.dz, pixel_size=data.pixel_size,
                        upsample=data.upsample)
        self.mean = SplinePSF(SplineData(coeff=spline_coefficients(data.mean), z_range=data.shape_range,
                                         source="field PSF: mean shape", **geometry))
        self.components = [SplinePSF(SplineData(coeff=spline_coefficients(c), z_range=data.shape_range,
                                                source=f"field PSF: component {k + 1}", **geometry))
                           for k, c in enumerate(data.components)]
        values = np.column_stack([data.bead_weights, data.bead_shift])
        self.interp = ThinPlate(data.bead_xy, values, float(max(data.field_shape)))
        self._low, self._high = widened_range(values)
        h, w = data.field_shape
        self.data = centre if centre is not None else self.at((w - 1) / 2, (h - 1) / 2)

    @property
    def patch_size(self) -> int:
        return self.mean.patch_size

    def to(self, device: torch.device | str) -> FieldSplinePSF:
        """Rendering moves each part's coefficients to ``device`` on use (``SplinePSF.to`` caches them)."""
        return self

    def __getstate__(self) -> dict:
        return {"field": self.field, "data": self.data}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["field"], state["data"])

    def weights(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(w (N, K), shift (N,) nm) at field positions x, y px (float32, on their device)."""
        v = self.interp.torch_at(x, y)
        low = torch.as_tensor(self._low, device=x.device)
        high = torch.as_tensor(self._high, device=x.device)
        v = torch.minimum(torch.maximum(v, low), high).float()
        return v[:, :-1], v[:, -1]

    def focal_shift(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The focal shift (nm) at field positions x, y px (``weights``' shift; ``FieldPupilPSF.focal_shift``)."""
        return self.weights(x, y)[1]

    def weights_np(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``weights`` in numpy (float64)."""
        v = np.clip(self.interp(np.column_stack([np.ravel(x), np.ravel(y)])), self._low, self._high)
        return v[:, :-1], v[:, -1]

    def patches(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, size: int, fx: torch.Tensor,
                fy: torch.Tensor, width: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Unit-flux patches ``(N, size, size), col0, row0`` (``SplinePSF.patches``) of emitters at field
        positions ``fx``, ``fy`` px."""
        w, shift = self.weights(fx, fy)
        zz = z.float() - shift.to(z.device)
        values, col0, row0 = self.mean.to(x.device).patches(x, y, zz, size, width)
        for k, comp in enumerate(self.components):
            values = values + w[:, k, None, None].to(values.device) * comp.to(x.device).patches(x, y, zz, size,
                                                                                                  width)[0]
        return values, col0, row0

    def render_spots(self, canvas: torch.Tensor, frame: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                     z: torch.Tensor, photons: torch.Tensor, width: torch.Tensor | None = None,
                     size: int | None = None, fx: torch.Tensor | None = None,
                     fy: torch.Tensor | None = None) -> torch.Tensor:
        """Add spots into ``canvas`` (T, H, W) in place (``SplinePSF.render_spots``); ``fx``, ``fy``: each
        emitter's field position (default: ``x``, ``y``: the canvas is the field)."""
        if canvas.dim() != 3:
            raise ValueError(f"render_spots: canvas must be (T, H, W), got shape {tuple(canvas.shape)}")
        n = frame.numel()
        if n == 0:
            return canvas
        fx = x if fx is None else fx
        fy = y if fy is None else fy
        size = self.patch_size if size is None else size
        for s in range(0, n, _CHUNK):
            sl = slice(s, min(n, s + _CHUNK))
            patches, col0, row0 = self.patches(x[sl], y[sl], z[sl], size, fx[sl], fy[sl],
                                               None if width is None else width[sl])
            scatter_patches(canvas, frame[sl], patches * photons[sl].to(patches.dtype)[:, None, None], col0, row0)
        return canvas

    def at(self, x: float, y: float) -> SplineData:
        """The PSF at field position (x, y) px as one spline (its z0 moved by the focal shift; the valid z range
        moved with it), with its width curves."""
        w, shift = self.weights_np(np.array([x]), np.array([y]))
        coeff = self.mean.data.coeff.astype(np.float64)
        for k, comp in enumerate(self.components):
            coeff = coeff + w[0, k] * comp.data.coeff
        d = self.mean.data
        lo, hi = self.field.shape_range
        z0 = d.z0 - float(shift[0]) / d.dz
        nodes = coeff[..., 0]
        sx, sy = gauss_widths(nodes)
        return SplineData(coeff=coeff.astype(np.float32), x0=d.x0, y0=d.y0, z0=z0, dz=d.dz,
                          z_range=(lo + float(shift[0]), hi + float(shift[0])), pixel_size=d.pixel_size,
                          source=f"field PSF at x {x:.0f}, y {y:.0f} px", upsample=d.upsample,
                          width_z=(np.arange(nodes.shape[0]) - z0) * d.dz, width_x=sx / d.upsample,
                          width_y=sy / d.upsample)

    def at_psf(self, x: float, y: float) -> SplinePSF:
        """``at`` as a ``SplinePSF`` (what a fit of spots at that position needs)."""
        return SplinePSF(self.at(x, y))
