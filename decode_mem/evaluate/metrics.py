"""Matching localizations to ground truth, and the SMLM-challenge-2016 metrics.

Matching (:func:`match_emitters`) is per frame. A prediction and a ground-truth emitter may be paired when
their lateral distance is ``<= tolerance_lat`` and ``|dz| <= tolerance_ax`` (nm; 250 and 500 by default, as in
the challenge). Among the allowed pairs the assignment is optimal, not greedy: first the largest possible
number of pairs, then, among those, the smallest total 3-D distance (``scipy.optimize.linear_sum_assignment``
on each connected group of candidates, found with a KD-tree and ``scipy.sparse.csgraph``). DECODE's own
evaluation is greedy and can find fewer pairs.

Metrics (:class:`Metrics`): Jaccard ``TP/(TP+FP+FN)``, recall, precision and F1 as fractions; RMSE lateral
``sqrt(mean(dx²+dy²))``, axial and volumetric, and the mean bias ``pred − gt`` in nm; efficiency in % as in the
challenge (Sage et al. 2019): ``E = 100 − sqrt((100 − 100·JI)² + α²·RMSE²)`` with α = 1 %/nm lateral and 0.5 %/nm
axial, ``E_vol = (E_lat + E_ax)/2``. Ratios with a zero denominator and errors without any match are NaN, and so
are the axial and volume metrics (RMSE, bias, efficiency) of 2-D data, where every z is 0: z was not measured.

Files are compared with ``evaluate_files`` (``python -m decode_mem.evaluate``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

from decode_mem.errors import ConfigError
from decode_mem.io.table import EmitterTable

ALPHA_LAT = 1.0  # % per nm
ALPHA_AX = 0.5  # % per nm


@dataclass(frozen=True)
class Matches:
    """Pairs ``(pred_index[k], gt_index[k])`` (row indices into the tables given) and their errors in nm.

    ``dx, dy, dz`` are ``pred − gt``; pairs are ordered by prediction index.
    """

    pred_index: np.ndarray
    gt_index: np.ndarray
    dx: np.ndarray
    dy: np.ndarray
    dz: np.ndarray
    n_pred: int
    n_gt: int

    @property
    def tp(self) -> int:
        return len(self.pred_index)

    @property
    def fp(self) -> int:
        return self.n_pred - self.tp

    @property
    def fn(self) -> int:
        return self.n_gt - self.tp


def _check_settings(pixel_size: float, tolerance_lat: float, tolerance_ax: float) -> None:
    if not math.isfinite(pixel_size) or pixel_size <= 0:
        raise ConfigError(f"pixel_size must be a positive number of nm, got {pixel_size!r}")
    for name, value in (("tolerance_lat", tolerance_lat), ("tolerance_ax", tolerance_ax)):
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{name} must be a finite number >= 0 nm, got {value!r}")


def match_emitters(
    pred: EmitterTable,
    gt: EmitterTable,
    *,
    pixel_size: float,
    tolerance_lat: float = 250.0,
    tolerance_ax: float = 500.0,
) -> Matches:
    """Optimal per-frame matching of ``pred`` to ``gt`` (see the module docstring).

    ``pixel_size`` converts x/y from px to nm; z is in nm already. Emitters with a non-finite x or y never
    match; a non-finite z matches nothing either.
    """
    pixel_size, tolerance_lat, tolerance_ax = float(pixel_size), float(tolerance_lat), float(tolerance_ax)
    _check_settings(pixel_size, tolerance_lat, tolerance_ax)
    n_pred, n_gt = len(pred), len(gt)
    none = np.zeros(0, np.int64)
    empty = Matches(none, none, *(np.zeros(0) for _ in range(3)), n_pred=n_pred, n_gt=n_gt)
    if n_pred == 0 or n_gt == 0:
        return empty

    def _coords(table: EmitterTable) -> tuple[np.ndarray, np.ndarray]:
        xy = np.column_stack([table["x"], table["y"]]).astype(np.float64) * pixel_size
        return xy, np.flatnonzero(np.isfinite(xy).all(axis=1))

    xy_p, ok_p = _coords(pred)
    xy_g, ok_g = _coords(gt)
    if len(ok_p) == 0 or len(ok_g) == 0:
        return empty
    f_p, f_g = pred["frame"], gt["frame"]
    # frames become a third coordinate spaced wider than the tolerance: one tree query gates all frames at once
    f_min = min(f_p[ok_p].min(), f_g[ok_g].min())
    spacing = 2.0 * tolerance_lat + 1.0
    pts_p = np.column_stack([xy_p[ok_p], (f_p[ok_p] - f_min) * spacing])
    pts_g = np.column_stack([xy_g[ok_g], (f_g[ok_g] - f_min) * spacing])
    radius = tolerance_lat * (1 + 1e-9) + 1e-9  # a little wider; the exact test follows
    pairs = cKDTree(pts_p).sparse_distance_matrix(cKDTree(pts_g), radius, output_type="ndarray")
    ip, ig = ok_p[pairs["i"]], ok_g[pairs["j"]]

    dx = xy_p[ip, 0] - xy_g[ig, 0]
    dy = xy_p[ip, 1] - xy_g[ig, 1]
    dz = pred["z"][ip].astype(np.float64) - gt["z"][ig].astype(np.float64)
    allowed = (f_p[ip] == f_g[ig]) & (dx * dx + dy * dy <= tolerance_lat**2) & (np.abs(dz) <= tolerance_ax)
    ip, ig, dx, dy, dz = ip[allowed], ig[allowed], dx[allowed], dy[allowed], dz[allowed]
    if len(ip) == 0:
        return empty
    chosen = _assign(ip, ig, np.sqrt(dx * dx + dy * dy + dz * dz), n_pred, n_gt, tolerance_lat, tolerance_ax)
    order = np.argsort(ip[chosen], kind="stable")
    sel = chosen[order]
    return Matches(ip[sel], ig[sel], dx[sel], dy[sel], dz[sel], n_pred=n_pred, n_gt=n_gt)


def _assign(
    ip: np.ndarray, ig: np.ndarray, dist: np.ndarray, n_pred: int, n_gt: int, tol_lat: float, tol_ax: float
) -> np.ndarray:
    """Indices of the chosen candidate pairs: max cardinality, then min total distance."""
    n_edges = len(ip)
    graph = coo_matrix((np.ones(n_edges), (ip, n_pred + ig)), shape=(n_pred + n_gt, n_pred + n_gt))
    _, labels = connected_components(graph, directed=False)
    comp = labels[ip]
    edges_in_comp = np.bincount(comp)
    single = edges_in_comp[comp] == 1  # one pred and one gt that see nobody else: match directly
    chosen = [np.flatnonzero(single)]
    multi = np.flatnonzero(~single)
    if len(multi):
        multi = multi[np.argsort(comp[multi], kind="stable")]
        bounds = np.flatnonzero(np.diff(comp[multi])) + 1
        scale = max(math.hypot(tol_lat, tol_ax), 1e-300)  # allowed costs in [0, 1]
        for group in np.split(multi, bounds):
            rows, r_inv = np.unique(ip[group], return_inverse=True)
            cols, c_inv = np.unique(ig[group], return_inverse=True)
            # a forbidden pair costs more than any full set of allowed pairs: cardinality comes first
            cost = np.full((len(rows), len(cols)), float(min(len(rows), len(cols)) + 1))
            edge = np.full((len(rows), len(cols)), -1, np.int64)
            cost[r_inv, c_inv] = dist[group] / scale
            edge[r_inv, c_inv] = group
            r, c = linear_sum_assignment(cost)
            e = edge[r, c]
            chosen.append(e[e >= 0])
    return np.concatenate(chosen)


def common_rmse_lat(preds: Sequence[EmitterTable], gt: EmitterTable, *, pixel_size: float,
                    tolerance_lat: float = 250.0, tolerance_ax: float = 500.0) -> tuple[int, list[float]]:
    """Precision apart from detection: the ground-truth emitters that every table of ``preds`` matched
    (:func:`match_emitters`, each table on its own) and each table's lateral RMSE (nm) on those only.

    A localizer that also finds dim emitters, which others miss, has a larger RMSE over its own matches although it
    may place every emitter the others found more precisely; on the common emitters the comparison is like for
    like. Returns ``(n, [rmse per table])``; the RMSEs are NaN where no emitter is common. Whole tables at once
    (evaluation sizes, not a streamed movie)."""
    squared = []
    for pred in preds:
        m = match_emitters(pred, gt, pixel_size=pixel_size, tolerance_lat=tolerance_lat, tolerance_ax=tolerance_ax)
        d2 = np.full(len(gt), np.nan)
        d2[m.gt_index] = m.dx ** 2 + m.dy ** 2
        squared.append(d2)
    common = np.all(np.isfinite(np.stack(squared)), axis=0) if squared else np.zeros(len(gt), bool)
    n = int(common.sum())
    return n, [math.sqrt(float(np.mean(d2[common]))) if n else math.nan for d2 in squared]


def efficiency(jaccard: float, rmse: float, alpha: float) -> float:
    """SMLM challenge 2016 efficiency in %: ``100 − sqrt((100 − 100·jaccard)² + alpha²·rmse²)`` (rmse in nm)."""
    return 100.0 - math.sqrt((100.0 - 100.0 * jaccard) ** 2 + (alpha * rmse) ** 2)


def _ratio(num: float, den: float) -> float:
    return num / den if den else math.nan


@dataclass(frozen=True)
class Metrics:
    """Detection and localization metrics; see the module docstring for definitions and units."""

    n_pred: int
    n_gt: int
    tp: int
    fp: int
    fn: int
    jaccard: float
    recall: float
    precision: float
    f1: float
    rmse_lat: float
    rmse_ax: float
    rmse_vol: float
    efficiency_lat: float
    efficiency_ax: float
    efficiency_vol: float
    bias_x: float
    bias_y: float
    bias_z: float
    pixel_size: float
    tolerance_lat: float
    tolerance_ax: float

    def as_dict(self) -> dict[str, float | int]:
        """Plain Python numbers (NaN where undefined)."""
        return {k: (int(v) if isinstance(v, (int, np.integer)) else float(v)) for k, v in asdict(self).items()}

    def table(self) -> str:
        """A human-readable, aligned summary (the rows of :meth:`rows`)."""
        rows = self.rows()
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)

    def rows(self) -> list[tuple[str, str]]:
        """(label, formatted value) pairs: the summary as a table's rows."""

        def f(v: float, unit: str = "", digits: int = 2) -> str:
            return "n/a" if math.isnan(v) else f"{v:.{digits}f}{unit}"

        return [
            ("predictions / ground truth", f"{self.n_pred} / {self.n_gt}"),
            ("TP / FP / FN", f"{self.tp} / {self.fp} / {self.fn}"),
            ("Jaccard", f(self.jaccard, "", 4)),
            ("recall / precision / F1", f"{f(self.recall, '', 4)} / {f(self.precision, '', 4)} / {f(self.f1, '', 4)}"),
            ("RMSE lat / ax / vol", f"{f(self.rmse_lat)} / {f(self.rmse_ax)} / {f(self.rmse_vol)} nm"),
            ("efficiency lat / ax / vol",
             f"{f(self.efficiency_lat)} / {f(self.efficiency_ax)} / {f(self.efficiency_vol)} %"),
            ("bias x / y / z (pred - gt)", f"{f(self.bias_x)} / {f(self.bias_y)} / {f(self.bias_z)} nm"),
            ("tolerance lat / ax, pixel", f"{self.tolerance_lat:g} / {self.tolerance_ax:g} nm, {self.pixel_size:g} nm"),
        ]


@dataclass
class StreamingMetrics:
    """Accumulates counts and error sums over ``update`` calls; keeps no per-emitter data.

    Each ``update(pred, gt)`` matches its two tables per frame; a frame's predictions and ground truth must come
    in the same call (a frame seen in only one of the two tables of a call counts as all FP or all FN).
    """

    pixel_size: float
    tolerance_lat: float = 250.0
    tolerance_ax: float = 500.0
    alpha_lat: float = ALPHA_LAT
    alpha_ax: float = ALPHA_AX
    n_pred: int = field(default=0, init=False)
    n_gt: int = field(default=0, init=False)
    tp: int = field(default=0, init=False)
    _sums: np.ndarray = field(default_factory=lambda: np.zeros(6), init=False, repr=False)  # Σdx Σdy Σdz Σdx² ..
    axial: bool = field(default=False, init=False)  # a z other than 0 seen: 3-D data, whose axial metrics count

    def __post_init__(self) -> None:
        _check_settings(float(self.pixel_size), float(self.tolerance_lat), float(self.tolerance_ax))

    def update(self, pred: EmitterTable, gt: EmitterTable) -> Matches:
        m = match_emitters(pred, gt, pixel_size=self.pixel_size, tolerance_lat=self.tolerance_lat,
                           tolerance_ax=self.tolerance_ax)
        self.n_pred += m.n_pred
        self.n_gt += m.n_gt
        self.tp += m.tp
        self.axial = self.axial or bool(np.any(pred["z"] != 0) or np.any(gt["z"] != 0))
        d = (m.dx, m.dy, m.dz)
        self._sums += [*(v.sum() for v in d), *((v * v).sum() for v in d)]
        return m

    def merge(self, other: StreamingMetrics) -> None:
        """Add another accumulator's totals (e.g. from another worker)."""
        self.n_pred += other.n_pred
        self.n_gt += other.n_gt
        self.tp += other.tp
        self.axial = self.axial or other.axial
        self._sums += other._sums

    def result(self) -> Metrics:
        tp, fp, fn = self.tp, self.n_pred - self.tp, self.n_gt - self.tp
        sx, sy, sz, sxx, syy, szz = (float(v) for v in self._sums)
        jaccard = _ratio(tp, tp + fp + fn)
        recall, precision = _ratio(tp, tp + fn), _ratio(tp, tp + fp)
        rmse_lat = math.sqrt(_ratio(sxx + syy, tp))
        rmse_ax = math.sqrt(_ratio(szz, tp))
        rmse_vol = math.sqrt(_ratio(sxx + syy + szz, tp))
        if not self.axial:  # 2-D: z is 0 everywhere, not measured
            rmse_ax = rmse_vol = sz = math.nan
        e_lat = efficiency(jaccard, rmse_lat, self.alpha_lat)
        e_ax = efficiency(jaccard, rmse_ax, self.alpha_ax)
        return Metrics(
            n_pred=self.n_pred, n_gt=self.n_gt, tp=tp, fp=fp, fn=fn,
            jaccard=jaccard, recall=recall, precision=precision, f1=_ratio(2 * tp, 2 * tp + fp + fn),
            rmse_lat=rmse_lat, rmse_ax=rmse_ax, rmse_vol=rmse_vol,
            efficiency_lat=e_lat, efficiency_ax=e_ax, efficiency_vol=(e_lat + e_ax) / 2,
            bias_x=_ratio(sx, tp), bias_y=_ratio(sy, tp), bias_z=_ratio(sz, tp),
            pixel_size=float(self.pixel_size), tolerance_lat=float(self.tolerance_lat),
            tolerance_ax=float(self.tolerance_ax),
        )


def evaluate(
    pred: EmitterTable,
    gt: EmitterTable,
    *,
    pixel_size: float,
    tolerance_lat: float = 250.0,
    tolerance_ax: float = 500.0,
    alpha_lat: float = ALPHA_LAT,
    alpha_ax: float = ALPHA_AX,
    block_emitters: int = 1_000_000,
) -> Metrics:
    """Metrics of ``pred`` against ``gt`` over all frames.

    Both tables are sorted by frame once and streamed through :class:`StreamingMetrics` in blocks of whole frames
    holding about ``block_emitters`` emitters, so temporary memory does not grow with the number of frames.
    """
    acc = StreamingMetrics(pixel_size, tolerance_lat, tolerance_ax, alpha_lat, alpha_ax)
    if block_emitters < 1:
        raise ConfigError(f"block_emitters must be >= 1, got {block_emitters!r}")
    pred, gt = pred.sorted_by_frame(), gt.sorted_by_frame()
    fp, fg = pred["frame"], gt["frame"]
    frames = np.union1d(fp, fg)  # sorted distinct frames
    if len(frames) == 0:
        acc.update(pred, gt)
        return acc.result()
    # emitters up to and including each distinct frame; cut where the running total passes a block
    total = np.searchsorted(fp, frames, side="right") + np.searchsorted(fg, frames, side="right")
    cuts = np.unique(np.searchsorted(total, np.arange(block_emitters, total[-1], block_emitters), side="left"))
    starts = np.concatenate([[0], cuts + 1])
    ends = np.concatenate([cuts + 1, [len(frames)]])
    for s, e in zip(starts, ends, strict=True):
        if s >= e:
            continue
        lo, hi = frames[s], frames[e - 1]
        sel_p = slice(np.searchsorted(fp, lo, "left"), np.searchsorted(fp, hi, "right"))
        sel_g = slice(np.searchsorted(fg, lo, "left"), np.searchsorted(fg, hi, "right"))
        acc.update(pred.select(sel_p), gt.select(sel_g))
    return acc.result()
