"""A PSF that changes across the field, from beads spread over it; one PSF where the beads show no change.

From the beads ``gather_beads`` cut (all stacks of one field: the same frame size), in steps:

1. register: each bead's 3-D shift to the beads' average (the one-PSF calibration's, ``beads.register_beads``).
   Its lateral part is where the bead happens to sit and is removed; its axial part is kept as the bead's *focal
   shift*: beads on one coverslip lie at one z, so a bead in focus a few frames later than another shows field
   curvature or a tilted focal plane, a property of the microscope at that place;
2. describe: every bead's volume, moved to the common focus and each plane scaled to sum 1, is the beads' mean
   shape plus a weighted sum of K principal components (how shapes differ between beads: astigmatism, coma, ...);
   a bead = (its weights, its focal shift);
3. interpolate: weights and focal shift over the field by thin-plate splines through the beads (exact at every
   bead; ``simulate.field_spline``), clamped to the beads' range widened by a quarter of it;
4. choose, by leaving each bead out in turn: its volume predicted from the other beads at its place, by the
   field-dependent PSF with K = 0 .. ``MAX_COMPONENTS`` components and by one PSF for the whole field (the
   others' average at the common focus, what ``psf`` gives without a field). The error: RMS(prediction − bead) /
   RMS(bead) over the valid planes. K is the one with the lowest median error; the field-dependent PSF is used
   when it predicts the beads better than one PSF beyond their noise — a lower mean error by a one-sided sign-flip
   test of the per-bead differences at ``P_LIMIT`` and a median error at least ``MIN_GAIN`` lower — and at least
   ``FIELD_MIN_BEADS`` beads are there. Otherwise one PSF, as before.

Coverage: the field points neither inside the beads' convex hull nor within the beads' typical spacing of one
(``COVERAGE_GRID`` points a side) have their PSF extrapolated; where that is more than ``UNCOVERED_LIMIT`` of the
field, a warning names the ninths of the field the beads leave uncovered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from decode_mem.errors import ConfigError
from decode_mem.io.field_psf_file import FieldPsfData
from decode_mem.io.psf_file import SplineData
from decode_mem.psf.beads import (
    BeadCalibration,
    BeadSet,
    BeadSettings,
    centre_volume,
    fourier_upsample,
    register_beads,
    shift_volume,
)
from decode_mem.simulate.field_spline import FieldSplinePSF, clamped_thin_plate, widened_range

FIELD_MIN_BEADS = 8
MAX_COMPONENTS = 6
P_LIMIT = 0.01
MIN_GAIN = 0.05
COVERAGE_GRID = 48
UNCOVERED_LIMIT = 0.05
NINTHS = (("top-left", "top", "top-right"), ("left", "centre", "right"), ("bottom-left", "bottom", "bottom-right"))
MODES = ("auto", "yes", "no")


@dataclass
class FieldCalibration:
    """What the field calibration found (module docstring): ``chosen`` (the field-dependent PSF is used) and why
    (``reason``), the file's parts (``data``, ``centre``) when chosen, the leave-one-bead-out errors per bead
    (``single_error``, ``field_error`` at ``components``), the errors' medians per K (``by_components``), the
    test's ``p_value``, the beads' positions (x, y px), focal shifts (nm) and weights, the coverage, and the
    1-px volumes (``mean``, ``comps``, z ``z``) the figure draws."""

    chosen: bool
    reason: str
    field_shape: tuple[int, int]
    bead_xy: np.ndarray
    shift_nm: np.ndarray = field(default_factory=lambda: np.zeros(0))
    weights: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    single_error: np.ndarray = field(default_factory=lambda: np.zeros(0))
    field_error: np.ndarray = field(default_factory=lambda: np.zeros(0))
    by_components: list[float] = field(default_factory=list)
    components: int = 0
    p_value: float = math.nan
    uncovered: float = 0.0
    uncovered_regions: tuple[str, ...] = ()
    covered_map: np.ndarray | None = None
    data: FieldPsfData | None = None
    centre: SplineData | None = None
    mean: np.ndarray | None = None
    comps: np.ndarray | None = None
    z: np.ndarray | None = None
    valid: slice = field(default_factory=lambda: slice(None))

    def warning(self) -> str | None:
        """One line where the beads leave parts of the field uncovered (None where they cover it)."""
        if self.uncovered <= UNCOVERED_LIMIT or not len(self.bead_xy):
            return None
        where = ", ".join(self.uncovered_regions) or "scattered places"
        return (f"the beads leave {self.uncovered:.0%} of the field uncovered ({where}): the PSF there is "
                "extrapolated from the nearest beads; add bead stacks with beads there")

    def summary(self) -> str:
        """One line: which PSF and why, with the leave-one-bead-out errors."""
        if not len(self.single_error):
            return f"one PSF for the whole field: {self.reason}"
        errors = (f"leave-one-bead-out error {100 * np.median(self.field_error):.1f} % with {self.components} "
                  f"component(s) + focal shift, {100 * np.median(self.single_error):.1f} % with one PSF "
                  f"(medians; p = {self.p_value:.2g})")
        if self.chosen:
            return (f"a PSF that changes across the field from {len(self.bead_xy)} beads: {errors}; focal shift "
                    f"{self.shift_nm.min():+.0f} to {self.shift_nm.max():+.0f} nm over the beads")
        return f"one PSF for the whole field ({self.reason}): {errors}"


def field_positions(bs: BeadSet) -> np.ndarray:
    """(B, 2) x, y px of the beads in the field."""
    return np.array([[c[1], c[0]] for c in bs.centres], np.float64).reshape(-1, 2)


def check_field_beads(bs: BeadSet, mode: str) -> str | None:
    """Why these beads cannot give a field-dependent PSF (None: they can); with ``mode`` 'yes' a ConfigError."""
    if mode not in MODES:
        raise ConfigError(f"--field must be one of {', '.join(MODES)}, got {mode!r}")
    names = ", ".join(bs.paths)
    problem = None
    if len(set(bs.frame_shapes)) > 1:
        sizes = ", ".join(f"{h}x{w}" for h, w in sorted(set(bs.frame_shapes)))
        problem = f"the bead stacks have different frame sizes ({sizes} px): their beads are not on one field"
    elif len(bs.beads) < FIELD_MIN_BEADS:
        problem = f"{len(bs.beads)} usable beads, a PSF that changes across the field needs at least {FIELD_MIN_BEADS}"
    else:
        xy = field_positions(bs)
        if np.linalg.matrix_rank(np.column_stack([np.ones(len(xy)), xy - xy.mean(axis=0)]), tol=1.0) < 3:
            problem = "the beads lie on one line: they cannot say how the PSF changes across the field"
    if problem is not None and mode == "yes":
        raise ConfigError(f"{names}: --field yes: {problem}")
    return problem


def calibrate_field(bs: BeadSet, single: BeadCalibration, settings: BeadSettings, pixel_size: float,
                    mode: str = "auto") -> FieldCalibration:
    """The field-dependent PSF of the beads ``bs`` (module docstring), or the reason for one PSF (``single``, the
    beads' one-PSF calibration, is then what to write). ``mode``: 'auto' (the test decides), 'yes' (always, when
    the beads allow it), 'no'."""
    shape = bs.frame_shapes[0] if bs.frame_shapes else (0, 0)
    xy = field_positions(bs)
    if mode == "no":
        return FieldCalibration(False, "--field no", shape, xy)
    problem = check_field_beads(bs, mode)
    if problem is not None:
        return FieldCalibration(False, problem, shape, xy)
    step = abs(float(settings.z_step))
    t = len(bs.z)
    beads = bs.beads
    if single.shifts is not None and len(single.shifts) == len(beads):  # the one-PSF calibration's registration
        shifts, (cy, cx) = single.shifts, single.centre
    else:
        average, shifts = register_beads(beads, settings.iterations)
        _, (cy, cx) = centre_volume(average)
    lateral = _per_plane(np.stack([shift_volume(b, (0.0, s[1] - cy, s[2] - cx))
                                   for b, s in zip(beads, shifts, strict=True)]), bs)
    sz, valid = _focus(lateral, shifts[:, 0], settings.edge_frames, bs)
    # planes: a bead's volume is the shape at z + sz (module docstring, step 1)
    aligned = _per_plane(np.stack([shift_volume(v, (s, 0.0, 0.0)) for v, s in zip(lateral, sz, strict=True)]), bs)
    margin = valid.start
    k_max = max(0, min(MAX_COMPONENTS, len(beads) - 4))
    single_err, field_err = _leave_one_out(aligned, lateral, xy, sz, valid, k_max, float(max(shape)))
    medians = [float(np.median(field_err[:, k])) for k in range(k_max + 1)]
    k = int(np.argmin(medians))
    chosen_err = field_err[:, k]
    p = _sign_flip(single_err - chosen_err)
    gain = 1 - np.median(chosen_err) / max(float(np.median(single_err)), 1e-12)
    mean, comps, weights = _pca(aligned, valid, k)
    out = FieldCalibration(False, "", shape, xy, shift_nm=-sz * step, weights=weights, single_error=single_err,
                           field_error=chosen_err, by_components=medians, components=k, p_value=p,
                           mean=mean, comps=comps, z=bs.z, valid=valid)
    out.uncovered, out.uncovered_regions, out.covered_map = _coverage(xy, shape)
    if mode == "auto" and not (p < P_LIMIT and gain >= MIN_GAIN):
        out.reason = (f"the beads show no change across the field beyond their noise: one PSF predicts each bead "
                      f"left out as well (needed: p < {P_LIMIT:g} and a median error {MIN_GAIN:.0%} lower)")
        return out
    out.chosen, out.reason = True, "chosen" if mode == "auto" else "--field yes"
    out.data, out.centre = _field_data(out, single, settings, pixel_size, step, t, margin)
    return out


def _focus(lateral: np.ndarray, start: np.ndarray, edge: int, bs: BeadSet,
           iterations: int = 2) -> tuple[np.ndarray, slice]:
    """Each bead's focal shift (planes) and the planes valid for all: least squares of the bead against the
    others' mean shape moved along z (the cross-correlation of the registration leans towards no shift: a
    bead's light fills every plane), from ``start``, the mean shift removed."""
    t = lateral.shape[1]
    sz = np.asarray(start, np.float64) - np.mean(start)
    offsets = np.linspace(-2.0, 2.0, 17)
    for _ in range(iterations):
        margin = edge + int(np.ceil(np.abs(sz).max())) + 2
        valid = slice(margin, t - margin)
        if valid.stop - valid.start < 4:
            raise ConfigError(f"{', '.join(bs.paths)}: the beads' focal shifts ({np.abs(sz).max():.1f} planes) "
                              "leave too few planes of the stacks valid: record longer stacks")
        mean = np.mean([shift_volume(v, (s, 0.0, 0.0)) for v, s in zip(lateral, sz, strict=True)], axis=0)
        for b, bead in enumerate(lateral):
            cost = np.array([((shift_volume(mean, (-(sz[b] + d), 0.0, 0.0))[valid] - bead[valid]) ** 2).sum()
                             for d in offsets])
            i = int(np.clip(np.argmin(cost), 1, len(offsets) - 2))
            c0, c1, c2 = cost[i - 1:i + 2]
            curve = c0 - 2 * c1 + c2
            best = offsets[i] + (0.5 * (c0 - c2) / curve * (offsets[1] - offsets[0]) if curve > 0 else 0.0)
            sz[b] += float(np.clip(best, offsets[0], offsets[-1]))
        sz -= sz.mean()
    margin = edge + int(np.ceil(np.abs(sz).max()))
    return sz, slice(margin, t - margin)


def _per_plane(volumes: np.ndarray, bs: BeadSet) -> np.ndarray:
    """Each bead's planes scaled to sum 1 (a bead's light per plane changes by bleaching, not the PSF's)."""
    sums = volumes.sum(axis=(2, 3), keepdims=True)
    if (sums <= 0).any():
        raise ConfigError(f"{', '.join(bs.paths)}: a bead has no light above its background in some planes "
                          "(beads too dim?)")
    return volumes / sums


def _pca(volumes: np.ndarray, valid: slice, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean (T, R, R), components (k, T, R, R), weights (B, k)) of ``volumes`` (B, T, R, R): principal
    components of the valid planes, extended to every plane by the same combinations of the beads."""
    mean = volumes.mean(axis=0)
    dev = volumes - mean
    x = dev[:, valid].reshape(len(volumes), -1)
    if k == 0:
        return mean, np.zeros((0, *mean.shape)), np.zeros((len(volumes), 0))
    u, s, _ = np.linalg.svd(x @ x.T)  # the Gram matrix: B x B
    sv = np.sqrt(np.clip(s[:k], 1e-30, None))
    mix = u[:, :k] / sv  # (B, k): component j = Σ_b mix[b, j] · dev_b, unit norm over the valid planes
    comps = np.tensordot(mix.T, dev, axes=1)
    weights = x @ comps[:, valid].reshape(k, -1).T
    return mean, comps, weights


def _leave_one_out(aligned: np.ndarray, lateral: np.ndarray, xy: np.ndarray, sz: np.ndarray, valid: slice,
                   k_max: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Each bead predicted from the others (module docstring, step 4): errors of one PSF (B,) and of the field-
    dependent PSF with 0 .. k_max components (B, k_max + 1)."""
    n = len(aligned)
    single = np.empty(n)
    fielded = np.empty((n, k_max + 1))
    for b in range(n):
        rest = np.delete(np.arange(n), b)
        mean, comps, weights = _pca(aligned[rest], valid, k_max)
        target = lateral[b, valid]
        norm = float(np.sqrt((target**2).sum()))
        single[b] = float(np.sqrt(((mean[valid] - target) ** 2).sum())) / norm
        values = np.column_stack([weights, sz[rest]])
        predicted = clamped_thin_plate(xy[rest], values, scale, xy[b:b + 1])[0]
        shape = mean.copy()
        for k in range(k_max + 1):
            if k:
                shape = shape + predicted[k - 1] * comps[k - 1]
            moved = shift_volume(shape, (-predicted[-1], 0.0, 0.0))
            fielded[b, k] = float(np.sqrt(((moved[valid] - target) ** 2).sum())) / norm
    return single, fielded


def _sign_flip(diff: np.ndarray, draws: int = 20000) -> float:
    """One-sided p that the mean of ``diff`` (one PSF's error − the field's, per bead) is > 0: the share of sign
    flips of the differences whose mean is as large (every flip for up to 16 beads, else ``draws`` random ones,
    seeded). Under no change the two predictions are exchangeable bead by bead; unlike a rank test it weighs how
    much better each bead is predicted, so a few beads far from the centre showing the change count."""
    d = np.asarray(diff, np.float64)
    n = len(d)
    if n == 0 or not np.any(d != 0):
        return 1.0
    observed = d.mean()
    if n <= 16:
        signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)
    else:
        signs = np.random.default_rng(0).choice([-1, 1], size=(draws, n))
    means = (signs * d).mean(axis=1)
    return float((np.sum(means >= observed - 1e-15) + (0 if n <= 16 else 1)) / (len(means) + (0 if n <= 16 else 1)))


def _coverage(xy: np.ndarray, shape: tuple[int, int]) -> tuple[float, tuple[str, ...], np.ndarray]:
    """(share of the field uncovered, the ninths mostly uncovered, covered map (G, G) bool) (module docstring)."""
    from scipy.spatial import Delaunay, cKDTree

    h, w = shape
    gy, gx = np.meshgrid(np.linspace(0, h - 1, COVERAGE_GRID), np.linspace(0, w - 1, COVERAGE_GRID), indexing="ij")
    pts = np.column_stack([gx.ravel(), gy.ravel()])
    tree = cKDTree(xy)
    spacing = float(np.median(tree.query(xy, k=2)[0][:, 1]))
    near = tree.query(pts)[0] <= spacing
    inside = Delaunay(xy).find_simplex(pts) >= 0
    covered = (near | inside).reshape(COVERAGE_GRID, COVERAGE_GRID)
    regions = []
    third = np.array_split(np.arange(COVERAGE_GRID), 3)
    for i in range(3):
        for j in range(3):
            part = covered[np.ix_(third[i], third[j])]
            if 1 - part.mean() > 0.3:
                regions.append(NINTHS[i][j])
    return float(1 - covered.mean()), tuple(regions), covered


def _field_data(cal: FieldCalibration, single: BeadCalibration, settings: BeadSettings, pixel_size: float,
                step: float, t: int, margin: int) -> tuple[FieldPsfData, SplineData]:
    """The file's parts: the field-dependent PSF on the spline's nodes, and the PSF at the field's centre."""
    up = settings.upsample
    mean = fourier_upsample(cal.mean, up)
    comps = np.stack([fourier_upsample(c, up) for c in cal.comps]) if len(cal.comps) else np.zeros((0, *mean.shape))
    z = cal.z
    z0 = float(-z[0] / step)
    focus = int(np.clip(round(z0), 0, len(z) - 1))
    total = float(mean[focus].sum()) / up**2  # as finish_spline: the focal plane's pixels sum to 1
    if not total > 0:
        raise ConfigError("the beads' mean PSF has no light at z = 0: check --z_start")
    shape_range = (float(z[margin]), float(z[t - 1 - margin]))
    shifts = cal.shift_nm
    span = shifts.max() - shifts.min()
    (lo_shift,), (hi_shift,) = widened_range(shifts[:, None])
    z_range = (shape_range[0] + hi_shift, shape_range[1] + lo_shift)
    if z_range[0] >= z_range[1]:
        raise ConfigError(f"the focal shift across the field ({span:.0f} nm) leaves no z valid everywhere in the "
                          f"bead stacks' {shape_range[0]:g} to {shape_range[1]:g} nm: record longer stacks")
    ny, nx = mean.shape[1:]
    data = FieldPsfData(field_shape=cal.field_shape, mean=mean / total, components=comps / total,
                        bead_xy=cal.bead_xy, bead_weights=cal.weights, bead_shift=shifts, x0=(nx - 1) / 2,
                        y0=(ny - 1) / 2, z0=z0, dz=step, upsample=up, z_range=z_range, shape_range=shape_range,
                        pixel_size=pixel_size,
                        info={"components": cal.components, "p_value": cal.p_value,
                              "loo_field": float(np.median(cal.field_error)),
                              "loo_single": float(np.median(cal.single_error)), "beads": len(cal.bead_xy),
                              "uncovered": cal.uncovered, "source": single.spline.source})
    h, w = cal.field_shape
    centre = FieldSplinePSF(data, single.spline).at((w - 1) / 2, (h - 1) / 2)
    lo, hi = centre.z_range
    return data, SplineData(coeff=centre.coeff, x0=centre.x0, y0=centre.y0, z0=centre.z0, dz=centre.dz,
                            z_range=(max(lo, z_range[0]), min(hi, z_range[1])), pixel_size=pixel_size,
                            source=f"field-dependent PSF at the field's centre; {single.spline.source}",
                            upsample=up, width_z=centre.width_z, width_x=centre.width_x, width_y=centre.width_y)
