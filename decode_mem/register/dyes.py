"""Colours of two-channel localizations: which dye each one is, block by block, and how sure that is overall.

Two dyes in two channels (no ratios given): each localization keeps its channel, and its dye is its channel. The
same emitter seen by both channels (a dye bleeding through) shows as a pair: the share of each channel's
localizations with a partner in the other (same frame, within ``radius``) is reported as the channels' overlap.

Ratiometric (dyes given with their ratios, ``io.channels.Dye``): every emitter is seen by both channels. Channel 2's
localizations, already mapped onto channel 1 (``Registration``), are paired with channel 1's: per frame, mutual
nearest neighbours closer than ``radius``. A pair becomes one localization (``channel`` 0): its position the
precision-weighted mean of the two (photon-weighted without precisions), photons and background summed, and
``ratio = I2 / (I1 + I2)``. Its dye is the dye whose ratio lies within ``window`` of it (``dye`` 1, 2, ...); a
ratio between two dyes' windows, or outside all of them, is ambiguous: ``dye`` 0, unassigned. So is a pair whose two
positions lie farther apart than their precisions allow (``CONSISTENT_CHI2``: two emitters of different dyes
blinking within the PSF are localized where each channel's brighter one is, and their mixed ratio would name a
third dye). A localization without a partner keeps its channel (1 or 2), ratio NaN and dye 0: nothing is dropped.

The crosstalk is estimated without ground truth: a Gaussian per dye (and a flat part for what fits none: two dyes'
blinks mixed, bad pairs) fitted by expectation-maximization to the histogram of all ratios; the crosstalk into dye
k is the share of the localizations assigned to k that the fit gives to the other dyes' Gaussians, plus of the
flat part in k's window the other dyes' share. Memory: the histogram and the
counts, whatever the number of localizations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.spatial import cKDTree
from scipy.special import ndtr

from decode_mem.errors import ConfigError
from decode_mem.io.channels import Dye
from decode_mem.io.table import EmitterTable

WINDOW_SHARE = 0.35  # default half-window: this share of the smallest gap between two dyes' ratios
HIST_BINS = 2000  # over HIST_RANGE: 0.001 wide
HIST_RANGE = (-0.5, 1.5)
EM_STEPS = 300
FRAME_GAP = 1e7  # px between frames in the pairing tree: pairs never cross frames
CONSISTENT_CHI2 = 13.8  # the chi-square (2 degrees of freedom) of a pair's distance over its precisions beyond which
# its two localizations are not taken for one emitter's (p = 0.001 for one emitter)


def default_window(dyes: tuple[Dye, ...]) -> float:
    """``WINDOW_SHARE`` of the smallest gap between two dyes' ratios (0.1 for a single dye)."""
    r = np.sort([d.ratio for d in dyes])
    return WINDOW_SHARE * float(np.diff(r).min()) if len(r) > 1 else 0.1


def mutual_pairs(t1: EmitterTable, t2: EmitterTable, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """Indices (i1, i2) of localizations of ``t1`` and ``t2`` (one pixel frame) in the same frame that are each
    other's nearest neighbour, closer than ``radius`` px."""
    if len(t1) == 0 or len(t2) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    a = np.column_stack([t1["x"], t1["y"], t1["frame"] * FRAME_GAP]).astype(np.float64)
    b = np.column_stack([t2["x"], t2["y"], t2["frame"] * FRAME_GAP]).astype(np.float64)
    da, ja = cKDTree(b).query(a)
    _, ib = cKDTree(a).query(b)
    i = np.nonzero((da < radius) & (ib[ja] == np.arange(len(a))))[0]
    return i, ja[i]


def _weighted(a: np.ndarray, b: np.ndarray, sa: np.ndarray | None, sb: np.ndarray | None,
              pa: np.ndarray, pb: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The mean of ``a`` and ``b`` weighted by their precisions (photons where there are none) and its precision."""
    if sa is not None and sb is not None:
        wa, wb = 1.0 / np.maximum(sa, 1e-6) ** 2, 1.0 / np.maximum(sb, 1e-6) ** 2
        return (wa * a + wb * b) / (wa + wb), 1.0 / np.sqrt(wa + wb)
    return (pa * a + pb * b) / np.maximum(pa + pb, 1e-9), None


def consistent(t1: EmitterTable, t2: EmitterTable, i1: np.ndarray, i2: np.ndarray, extra: float = 0.0) -> np.ndarray:
    """Whether each pair's two positions agree within their precisions and ``extra`` px (the registration's error)
    (``CONSISTENT_CHI2``; all True without precisions)."""
    if not all(c in t for t in (t1, t2) for c in ("sigma_x", "sigma_y")):
        return np.ones(len(i1), bool)
    chi2 = np.zeros(len(i1))
    for axis, sigma in (("x", "sigma_x"), ("y", "sigma_y")):
        var = t1[sigma][i1].astype(np.float64) ** 2 + t2[sigma][i2].astype(np.float64) ** 2 + extra**2
        chi2 += (t1[axis][i1].astype(np.float64) - t2[axis][i2]) ** 2 / np.maximum(var, 1e-12)
    return ~(chi2 > CONSISTENT_CHI2)  # NaN precisions: taken as consistent


def merge_pairs(t1: EmitterTable, t2: EmitterTable, i1: np.ndarray, i2: np.ndarray) -> EmitterTable:
    """The pairs as one localization each (``channel`` 0, ``ratio``; module docstring)."""
    a, b = t1.select(i1), t2.select(i2)
    p1, p2 = a["photons"].astype(np.float64), b["photons"].astype(np.float64)
    cols: dict[str, np.ndarray] = {"frame": a["frame"]}
    for axis, sigma in (("x", "sigma_x"), ("y", "sigma_y"), ("z", "sigma_z")):
        sa = a[sigma].astype(np.float64) if sigma in a and sigma in b else None
        sb = b[sigma].astype(np.float64) if sigma in a and sigma in b else None
        cols[axis], s = _weighted(a[axis].astype(np.float64), b[axis].astype(np.float64), sa, sb, p1, p2)
        if s is not None:
            cols[sigma] = s
    cols["photons"] = p1 + p2
    cols["bg"] = a["bg"].astype(np.float64) + b["bg"].astype(np.float64)
    if "prob" in a and "prob" in b:
        cols["prob"] = np.maximum(a["prob"], b["prob"])
    if "sigma_photons" in a and "sigma_photons" in b:
        cols["sigma_photons"] = np.hypot(a["sigma_photons"], b["sigma_photons"])
    cols["channel"] = np.zeros(len(a))
    with np.errstate(invalid="ignore", divide="ignore"):
        cols["ratio"] = p2 / (p1 + p2)
    return EmitterTable(cols)


@dataclass
class ChannelCounts:
    """What the blocks so far held, per channel and dye."""

    channel1: int = 0
    channel2: int = 0
    paired: int = 0
    inconsistent: int = 0  # pairs whose positions disagree beyond their precisions


class DyeAssigner:
    """Block by block: the two channels' localizations (channel 2's mapped onto channel 1's pixels) -> one table with
    ``channel``, ``dye`` and (ratiometric) ``ratio`` (module docstring); ``summary()``: counts and crosstalk.

    ``dyes`` None: one dye per channel; else the ratiometric dyes, ``window`` their half-window (default
    ``default_window``). ``radius``: px of channel 1 within which two localizations are one emitter;
    ``registration_error``: px, the map's error, added to the pairs' precisions in their consistency test."""

    def __init__(self, dyes: tuple[Dye, ...] | None, radius: float, window: float | None = None,
                 registration_error: float = 0.0) -> None:
        if not radius > 0:
            raise ConfigError(f"pair radius must be > 0, got {radius}")
        self.dyes = dyes
        self.radius = float(radius)
        self.registration_error = float(registration_error)
        self.window = None if dyes is None else (default_window(dyes) if window is None else float(window))
        if self.window is not None and not 0 < self.window <= 0.5:
            raise ConfigError(f"ratio window must be in (0, 0.5] (a share of the photons), got {self.window}")
        self.counts = ChannelCounts()
        self.per_dye = np.zeros(1 + (2 if dyes is None else len(dyes)), np.int64)  # [unassigned, dye 1, ...]
        self.hist = np.zeros(HIST_BINS, np.int64)
        self.outside = 0  # ratios beyond the histogram's range

    @property
    def names(self) -> list[str]:
        return ["channel 1", "channel 2"] if self.dyes is None else [d.name for d in self.dyes]

    @property
    def ratiometric(self) -> bool:
        return self.dyes is not None

    def assign(self, ratio: np.ndarray) -> np.ndarray:
        """The dye (1-based; 0 unassigned) of each ratio (module docstring)."""
        assert self.dyes is not None and self.window is not None
        r = np.asarray(ratio, np.float64)
        dye = np.zeros(len(r))
        for k, d in enumerate(self.dyes, 1):
            dye[np.abs(r - d.ratio) <= self.window] = k  # windows never overlap: WINDOW_SHARE < 0.5
        return dye

    def block(self, t1: EmitterTable, t2: EmitterTable) -> EmitterTable:
        """One block's localizations of channel 1 and (mapped) channel 2 -> the block's table, sorted by frame."""
        self.counts.channel1 += len(t1)
        self.counts.channel2 += len(t2)
        i1, i2 = mutual_pairs(t1, t2, self.radius)
        self.counts.paired += len(i1)
        ok = consistent(t1, t2, i1, i2, self.registration_error) if self.ratiometric else np.ones(len(i1), bool)
        self.counts.inconsistent += int((~ok).sum())
        if not self.ratiometric:
            parts = [_with(t1, channel=1.0, dye=1.0), _with(t2, channel=2.0, dye=2.0)]
            self.per_dye[1] += len(t1)
            self.per_dye[2] += len(t2)
        else:
            pairs = merge_pairs(t1, t2, i1, i2)
            dye = np.where(ok, self.assign(pairs["ratio"]), 0.0)
            self.per_dye += np.bincount(dye.astype(np.int64), minlength=len(self.per_dye))
            r = pairs["ratio"].astype(np.float64)[ok]  # the ratios a dye could be assigned from
            inside = (r >= HIST_RANGE[0]) & (r < HIST_RANGE[1])
            self.hist += np.histogram(r[inside], HIST_BINS, HIST_RANGE)[0]
            self.outside += int((~inside).sum())
            rest1 = np.setdiff1d(np.arange(len(t1)), i1)
            rest2 = np.setdiff1d(np.arange(len(t2)), i2)
            nan = float("nan")
            parts = [EmitterTable({**pairs.columns, "dye": dye}),
                     _with(t1.select(rest1), channel=1.0, dye=0.0, ratio=nan),
                     _with(t2.select(rest2), channel=2.0, dye=0.0, ratio=nan)]
            self.per_dye[0] += len(rest1) + len(rest2)
        return _concat(parts).sorted_by_frame()

    def summary(self) -> dict[str, Any]:
        """Counts per dye, the unassigned, the pairs and the estimated crosstalk (module docstring)."""
        c = self.counts
        out: dict[str, Any] = {
            "mode": "ratiometric" if self.ratiometric else "one dye per channel",
            "localizations": {"channel1": c.channel1, "channel2": c.channel2, "pairs": c.paired},
            "pair_radius_px": self.radius}
        if not self.ratiometric:
            out["dyes"] = {"channel 1": int(self.per_dye[1]), "channel 2": int(self.per_dye[2])}
            out["overlap"] = {"channel1_with_partner": _share(c.paired, c.channel1),
                              "channel2_with_partner": _share(c.paired, c.channel2),
                              "note": "localizations with one of the other channel in the same frame within the "
                                      "pair radius: a dye bleeding through (or neighbours by chance)"}
            return out
        assert self.dyes is not None
        total = int(self.per_dye.sum())
        out["dyes"] = {d.name: int(n) for d, n in zip(self.dyes, self.per_dye[1:], strict=True)}
        out["unassigned"] = int(self.per_dye[0])
        out["unpaired"] = int(c.channel1 + c.channel2 - 2 * c.paired)
        out["inconsistent_pairs"] = c.inconsistent
        out["assigned_share_of_pairs"] = _share(int(self.per_dye[1:].sum()), c.paired)
        out["assigned_share"] = _share(int(self.per_dye[1:].sum()), total)
        out["ratio_window"] = self.window
        out["dye_ratios"] = {d.name: d.ratio for d in self.dyes}
        out["crosstalk"] = estimate_crosstalk(self.hist, self.dyes, self.window)
        return out

    def histogram(self) -> tuple[np.ndarray, np.ndarray]:
        """(bin edges, counts) of the paired localizations' ratios."""
        return np.linspace(*HIST_RANGE, HIST_BINS + 1), self.hist.copy()


def _share(part: int, whole: int) -> float | None:
    return None if whole == 0 else round(part / whole, 5)


def _with(table: EmitterTable, **columns: float) -> EmitterTable:
    return EmitterTable({**table.columns, **{k: np.full(len(table), v) for k, v in columns.items()}})


def _concat(parts: list[EmitterTable]) -> EmitterTable:
    """Tables of different optional columns as one: a column some lack is NaN there."""
    names = list(dict.fromkeys(n for p in parts for n in p.names))
    return EmitterTable({n: np.concatenate([p[n] if n in p else np.full(len(p), np.nan) for p in parts])
                         for n in names})


def estimate_crosstalk(hist: np.ndarray, dyes: tuple[Dye, ...], window: float) -> dict[str, Any]:
    """The mixture fit of the ratio histogram and the crosstalk it implies (module docstring); ``None`` numbers
    where there are no ratios."""
    centres = np.linspace(*HIST_RANGE, HIST_BINS + 1)
    centres = (centres[1:] + centres[:-1]) / 2
    n = float(hist.sum())
    k = len(dyes)
    if n < 10 * k:
        return {"overall": None, "per_dye": {d.name: None for d in dyes}, "fit": None,
                "note": "too few pairs for a fit"}
    mu = np.array([d.ratio for d in dyes], np.float64)
    sigma = np.full(k, window / 2)
    weight = np.full(k + 1, 1.0 / (k + 1))  # the last: flat over [0, 1] (what fits no dye)
    w = hist.astype(np.float64)
    flat = ((centres >= 0) & (centres <= 1)).astype(np.float64)
    flat /= max(flat.sum(), 1.0)
    width = centres[1] - centres[0]
    for _ in range(EM_STEPS):
        dens = np.vstack([weight[:k, None] * width * np.exp(-0.5 * ((centres - mu[:, None]) / sigma[:, None]) ** 2)
                          / (sigma[:, None] * math.sqrt(2 * math.pi)), weight[k] * flat])
        resp = dens / np.maximum(dens.sum(axis=0), 1e-300)
        nk = (resp * w).sum(axis=1)
        weight = nk / n
        mu = (resp[:k] * w * centres).sum(axis=1) / np.maximum(nk[:k], 1e-12)
        var = (resp[:k] * w * (centres - mu[:, None]) ** 2).sum(axis=1) / np.maximum(nk[:k], 1e-12)
        sigma = np.sqrt(np.maximum(var, (width / 2) ** 2))
    r = np.array([d.ratio for d in dyes])
    lo, hi = r - window, r + window
    # share of dye j's Gaussian inside dye k's window: (j, k)
    inside = ndtr((hi[None, :] - mu[:, None]) / sigma[:, None]) - ndtr((lo[None, :] - mu[:, None]) / sigma[:, None])
    into = weight[:k, None] * inside  # expected share of all pairs: from j, assigned to k
    # the flat part in each window (outliers: mixed blinks of two dyes, bad pairs): a dye by the dyes' shares there
    flat_in = weight[k] * 2 * window
    assigned = into.sum(axis=0) + flat_in
    wrong = assigned - np.diag(into) - flat_in * weight[:k] / max(weight[:k].sum(), 1e-12)
    per_dye = {d.name: (float(wrong[i] / assigned[i]) if assigned[i] > 0 else None) for i, d in enumerate(dyes)}
    return {"overall": float(wrong.sum() / assigned.sum()) if assigned.sum() > 0 else None, "per_dye": per_dye,
            "fit": {d.name: {"ratio": float(mu[i]), "sigma": float(sigma[i]), "share": float(weight[i])}
                    for i, d in enumerate(dyes)} | {"flat share": float(weight[k])},
            "note": "a Gaussian per dye and a flat part fitted to the ratio histogram; crosstalk into a dye: the share "
                    "of its assigned localizations that the fit gives to the other dyes' Gaussians, and of the flat "
                    "part's there the share of the other dyes"}
