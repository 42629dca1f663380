"""The map from channel 2's pixels to channel 1's: a polynomial (degree 1: affine) or an affine map plus a thin-plate
spline, fitted to matched bead positions; the kind and its smoothing chosen by leave-one-out error.

Coordinates are normalized before fitting, ``u = (p - centre) / scale`` (the channel-2 field's centre and half its
longer side), so the numbers are well conditioned whatever the frame size. A polynomial of degree ``d`` is least
squares on the monomials ``u^a v^b`` (a + b <= d); it reproduces a polynomial map of degree <= d exactly (to
rounding). The thin-plate spline (TPS) with smoothing ``λ`` minimizes ``Σ |f(p_i) - q_i|² + λ·J(f)`` (J the
bending energy): solved as ``[[K + λI, P], [Pᵀ, 0]] [w; a] = [q; 0]`` with ``K_ij = r² log r``, ``P = [1, u, v]``;
``λ = 0`` interpolates the beads, large ``λ`` tends to the affine map. It reproduces an affine map exactly.

``choose_transform`` fits every candidate (affine; polynomials of degree 2-4 where the beads are at least twice the
coefficients; TPS over a range of ``λ``) and keeps the one whose leave-one-out error (each bead predicted by the map
fitted without it) is smallest: what a bead the map never saw is mapped to, the target registration error at the
beads. ``Transform.to_dict``/``from_dict``: what the registration file keeps, every number to reproduce the map.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decode_mem.errors import ConfigError

KINDS = ("auto", "affine", "polynomial", "tps")
TPS_SMOOTHING = (0.0, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)  # λ tried (normalized units)
MAX_DEGREE = 4
MIN_BEADS = 5  # an affine map has 3 coefficients per axis; its leave-one-out error needs a few more


def monomials(u: np.ndarray, v: np.ndarray, degree: int) -> np.ndarray:
    """(n, terms): ``u^a v^b`` for a + b <= degree, by total degree (1, u, v, u², uv, v², ...)."""
    cols = [u**(d - b) * v**b for d in range(degree + 1) for b in range(d + 1)]
    return np.column_stack(cols) if len(np.atleast_1d(u)) else np.zeros((0, len(cols)))


def n_terms(degree: int) -> int:
    return (degree + 1) * (degree + 2) // 2


def _tps_kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``r² log r`` between the rows of ``a`` (n, 2) and ``b`` (m, 2); 0 at r = 0."""
    d2 = ((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = 0.5 * d2 * np.log(d2)
    return np.where(d2 > 0, k, 0.0)


@dataclass(frozen=True)
class Transform:
    """Channel-2 px -> channel-1 px (module docstring). ``kind`` 'polynomial' (``degree``, ``coefficients`` (terms,
    2)) or 'tps' (``coefficients`` its affine part (3, 2), ``points`` (n, 2) normalized, ``weights`` (n, 2),
    ``smoothing``); ``centre`` (x, y) and ``scale`` px normalize channel-2 coordinates."""

    kind: str
    centre: tuple[float, float]
    scale: float
    degree: int
    coefficients: np.ndarray
    points: np.ndarray | None = None
    weights: np.ndarray | None = None
    smoothing: float = 0.0
    label: str = field(default="", compare=False)

    def __call__(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Channel-1 px of channel-2 px ``x``, ``y`` (any shape; float64)."""
        x = np.asarray(x, np.float64)
        shape = x.shape
        u = (x.ravel() - self.centre[0]) / self.scale
        v = (np.asarray(y, np.float64).ravel() - self.centre[1]) / self.scale
        out = monomials(u, v, self.degree) @ self.coefficients
        if self.kind == "tps" and self.points is not None and self.weights is not None:
            for s in range(0, len(u), 1 << 16):  # the kernel of a chunk: (chunk, beads) floats
                out[s:s + (1 << 16)] += _tps_kernel(np.column_stack([u[s:s + (1 << 16)], v[s:s + (1 << 16)]]),
                                                    self.points) @ self.weights
        return out[:, 0].reshape(shape), out[:, 1].reshape(shape)

    @property
    def name(self) -> str:
        """'affine', 'polynomial 3', 'tps (smoothing 1e-05)'."""
        if self.kind == "polynomial":
            return "affine" if self.degree == 1 else f"polynomial {self.degree}"
        return f"tps (smoothing {self.smoothing:g})"

    def affine_part(self) -> np.ndarray:
        """(2, 3) ``[[a, b, tx], [c, d, ty]]`` in px of the map's degree-1 terms: ``x1 = a x2 + b y2 + tx``."""
        c = self.coefficients
        s, (cx, cy) = self.scale, self.centre
        lin = np.array([[c[1, 0], c[2, 0]], [c[1, 1], c[2, 1]]]) / s
        t = c[0] - lin @ np.array([cx, cy])
        return np.column_stack([lin, t])

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"maps": "channel 2 px -> channel 1 px", "kind": self.kind, "name": self.name,
                             "centre": list(self.centre), "scale": self.scale, "degree": self.degree,
                             "coefficients": self.coefficients.tolist(),
                             "formula": "u = (p - centre) / scale; p1 = monomials(u, degree) @ coefficients"
                                        + (" + sum_i weights_i * r_i^2 log r_i, r_i = |u - points_i|"
                                           if self.kind == "tps" else "")}
        if self.kind == "tps":
            d.update(points=np.asarray(self.points).tolist(), weights=np.asarray(self.weights).tolist(),
                     smoothing=self.smoothing)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Transform:
        kind = d["kind"]
        if kind not in ("polynomial", "tps"):
            raise ConfigError(f"transform kind {kind!r} unknown (polynomial, tps)")
        arr = lambda k: None if d.get(k) is None else np.asarray(d[k], np.float64)  # noqa: E731
        t = cls(kind, tuple(float(v) for v in d["centre"]), float(d["scale"]), int(d["degree"]),
                np.asarray(d["coefficients"], np.float64), arr("points"), arr("weights"), float(d.get("smoothing", 0)))
        tps_ok = (t.points is not None and t.weights is not None and t.points.shape == t.weights.shape
                  and t.points.shape[1:] == (2,))
        if t.coefficients.shape != (n_terms(t.degree), 2) or (kind == "tps" and not tps_ok):
            raise ConfigError("transform: its coefficients do not have the shapes its kind and degree need")
        return t


def fit_polynomial(src: np.ndarray, dst: np.ndarray, degree: int, centre: tuple[float, float],
                   scale: float) -> Transform:
    """Least-squares polynomial of ``degree`` taking ``src`` (n, 2) to ``dst`` (n, 2)."""
    u = (src - np.asarray(centre)) / scale
    a = monomials(u[:, 0], u[:, 1], degree)
    coef, *_ = np.linalg.lstsq(a, dst, rcond=None)
    return Transform("polynomial", (float(centre[0]), float(centre[1])), float(scale), degree, coef)


def fit_tps(src: np.ndarray, dst: np.ndarray, smoothing: float, centre: tuple[float, float],
            scale: float) -> Transform:
    """Thin-plate spline (plus its affine part) with ``smoothing`` taking ``src`` to ``dst`` (module docstring)."""
    u = (src - np.asarray(centre)) / scale
    n = len(u)
    k = _tps_kernel(u, u) + smoothing * np.eye(n)
    p = monomials(u[:, 0], u[:, 1], 1)
    system = np.block([[k, p], [p.T, np.zeros((3, 3))]])
    rhs = np.vstack([dst, np.zeros((3, 2))])
    sol = np.linalg.lstsq(system, rhs, rcond=None)[0] if np.linalg.cond(system) > 1e14 else np.linalg.solve(system, rhs)
    return Transform("tps", (float(centre[0]), float(centre[1])), float(scale), 1, sol[n:], u.copy(), sol[:n],
                     float(smoothing))


@dataclass(frozen=True)
class Candidate:
    """One kind of map tried: its name, how to fit it, its leave-one-out residuals (n, 2) px."""

    name: str
    fit: Any
    residuals: np.ndarray

    @property
    def rms(self) -> float:
        return float(np.sqrt((self.residuals**2).sum(axis=1).mean()))


def leave_one_out(fit: Any, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """(n, 2): each bead's ``dst`` minus where the map fitted without it takes its ``src``."""
    out = np.empty_like(dst, dtype=np.float64)
    keep = np.ones(len(src), bool)
    for i in range(len(src)):
        keep[i] = False
        t = fit(src[keep], dst[keep])
        out[i] = dst[i] - np.array([v[0] for v in t(src[i:i + 1, 0], src[i:i + 1, 1])])
        keep[i] = True
    return out


def candidates(n: int, kind: str = "auto") -> list[tuple[str, Any]]:
    """The maps tried for ``n`` beads: (name, fit(src, dst, centre, scale))."""
    if kind not in KINDS:
        raise ConfigError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    out: list[tuple[str, Any]] = []
    if kind in ("auto", "affine"):
        out.append(("affine", lambda s, d, c, k: fit_polynomial(s, d, 1, c, k)))
    if kind in ("auto", "polynomial"):
        for degree in range(2, MAX_DEGREE + 1):
            if n >= 2 * n_terms(degree):
                out.append((f"polynomial {degree}", lambda s, d, c, k, g=degree: fit_polynomial(s, d, g, c, k)))
    if kind in ("auto", "tps") and n >= 8:
        for lam in TPS_SMOOTHING:
            out.append((f"tps (smoothing {lam:g})", lambda s, d, c, k, m=lam: fit_tps(s, d, m, c, k)))
    return out


def choose_transform(src: np.ndarray, dst: np.ndarray, centre: tuple[float, float], scale: float,
                     kind: str = "auto") -> tuple[Transform, Candidate, list[Candidate]]:
    """The map of ``kind`` ('auto': any) with the smallest leave-one-out error, fitted to all beads; that
    candidate (its leave-one-out residuals) and every candidate tried."""
    src, dst = np.asarray(src, np.float64), np.asarray(dst, np.float64)
    if len(src) < MIN_BEADS:
        raise ConfigError(f"{len(src)} beads matched in both channels; a registration needs at least {MIN_BEADS} "
                          "(and some 20 or more spread over the field to map a distortion)")
    tried = []
    for name, fit in candidates(len(src), kind):
        f = lambda s, d, fit=fit: fit(s, d, centre, scale)  # noqa: E731
        tried.append(Candidate(name, f, leave_one_out(f, src, dst)))
    if not tried:
        raise ConfigError(f"kind {kind}: {len(src)} beads are too few for it (tps needs 8)")
    best = min(tried, key=lambda c: c.rms)
    return best.fit(src, dst), best, tried
