"""Streaming linking: localizations of consecutive frames (up to ``max_dark`` frames missing) within a radius
become one molecule.

``Linker(radius, max_dark).feed(table)`` takes tables in frame order (any chunking; a chunk's frames may be out
of order, but never before a frame already linked) and returns a :class:`LinkStep`: the rows it could link so far,
each with its molecule id (``group``, numbered in the order the molecules first appear), the molecules that can
grow no further and the links made. ``finish()`` returns the rest. Held between calls: the last frame seen (a
frame is linked as a whole), the localizations of the last ``max_dark + 1`` frames that have no successor yet
and the running sums of the molecules they belong to — memory follows the linking window, not the table.

Which links: every pair of localizations at most ``radius`` apart whose frames differ by 1 to ``max_dark + 1``
is a candidate; candidates are taken greedily, shortest frame gap first, then shortest distance, each
localization linked to at most one predecessor and one successor (so crossing emitters are told apart by
distance, where Picasso takes the first one it finds in file order). Chunks give exactly the links of the whole
table at once: a candidate never competes with one whose later localization comes later than its own.

With a ``sigma_gate`` k (and σ columns), the localizer's own precision widens the radius where it says a
localization is uncertain: a pair farther apart than ``radius`` but at most ``reach`` is a candidate too when
its difference is within k combined σ (``dx² / (σx₁² + σx₂²) + dy² / (σy₁² + σy₂²) <= k²``), and candidates are
taken in the order of that normalized distance (a pair without σ: its distance as a fraction of the radius,
times k). decode_mem's localizations that break a blink at a fixed radius are mostly ones whose σ is about twice the
median (a diagnosis on bench_postprocess's 1/µm² movie, in the commit that added the gate; not in the report): a
fixed radius wide enough for them links more neighbours of the precise ones.

A molecule: its localizations' photon-weighted position (weights ``max(photons, 1)``), summed photons, ``n``
localizations, ``len = last frame - first frame + 1``, its first frame, mean ``bg`` and largest ``prob``, and the
combined precision of the weighted mean of errors that correlate as ``ErrorCorrelation`` says:
``var = sum_ij w_i w_j σ_i σ_j ρ(|f_i - f_j|)``, computed exactly for lags with a correlation of their own and
with ``ρ_beyond`` for the rest — for errors that do not average out it does not shrink as 1/√n.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from decode_mem.errors import ConfigError, StackError
from decode_mem.io.table import EmitterTable
from decode_mem.link.correlation import INDEPENDENT, ErrorCorrelation

WORK_ROWS = 1 << 16  # rows linked at a time
AXES = ("x", "y", "z")
SIGMAS = {"x": "sigma_x", "y": "sigma_y", "z": "sigma_z"}


@dataclass(frozen=True)
class Molecules:
    """Linked molecules: ``table`` (frame = first frame, photon-weighted x/y/z, summed photons, mean bg, largest
    prob, combined sigma_x/y/z where the input had them), ``group`` (id), ``n`` (localizations), ``length``
    (frames from first to last, Picasso's ``len``)."""

    table: EmitterTable
    group: np.ndarray
    n: np.ndarray
    length: np.ndarray

    def __len__(self) -> int:
        return len(self.group)


@dataclass(frozen=True)
class LinkPairs:
    """The links made: ``lag`` (frames), ``dx``, ``dy`` (px, later - earlier) and the two localizations'
    ``sigma_x``/``sigma_y`` (px; NaN where the input has none), ``group`` of the molecule."""

    lag: np.ndarray
    dx: np.ndarray
    dy: np.ndarray
    sx: np.ndarray  # (k, 2): earlier, later
    sy: np.ndarray
    group: np.ndarray


@dataclass(frozen=True)
class LinkStep:
    """What one ``feed``/``finish`` settled: ``rows`` (frame order) with their molecule ``group``, the
    ``molecules`` that are complete and the ``pairs`` linked (None from a ``Linker(..., pairs=False)``)."""

    rows: EmitterTable
    group: np.ndarray
    molecules: Molecules
    pairs: LinkPairs | None


class Linker:
    """Links a frame-ordered stream of localizations (module docstring). ``radius`` in px; ``pairs``: give each
    step the pairs linked (what the precision estimate reads; writing linked files does not need them)."""

    def __init__(self, radius: float, max_dark: int = 1, correlation: ErrorCorrelation = INDEPENDENT, *,
                 sigma_gate: float = 0.0, reach: float | None = None, pairs: bool = True) -> None:
        if not np.isfinite(radius) or radius <= 0:
            raise ConfigError(f"link: the radius must be > 0, got {radius}")
        if int(max_dark) != max_dark or max_dark < 0:
            raise ConfigError(f"link: max_dark must be an integer >= 0 frames, got {max_dark}")
        if not np.isfinite(sigma_gate) or sigma_gate < 0:
            raise ConfigError(f"link: the sigma gate must be >= 0 combined σ (0: off), got {sigma_gate}")
        reach = float(radius) if reach is None or sigma_gate == 0 else float(reach)
        if not np.isfinite(reach) or reach < radius:
            raise ConfigError(f"link: the reach of the sigma gate must be >= the radius ({radius}), got {reach}")
        self.radius, self.max_dark, self.correlation = float(radius), int(max_dark), correlation
        self.sigma_gate, self.reach = float(sigma_gate), reach
        self.with_pairs = pairs
        self._names: tuple[str, ...] | None = None
        self._axes: tuple[str, ...] = ()  # the axes with a σ column
        self._held: EmitterTable | None = None  # the last frame seen: linked when the next frame arrives
        self._last_frame: int | None = None  # the last frame linked
        self._tail: dict[str, np.ndarray] | None = None  # unsucceeded localizations of the window
        self._open: dict[str, np.ndarray] | None = None  # sums of the molecules still open, by group
        self._next_group = 0

    # -- public -----------------------------------------------------------------------------------------------
    def feed(self, table: EmitterTable) -> Iterator[LinkStep]:
        """Link ``table`` (after the rows already given), ``WORK_ROWS`` rows at a time (small arrays: a fresh
        large array costs page faults that cost more than the work); the rows of its last frame wait."""
        for start in range(0, len(table), WORK_ROWS):
            step = self._feed(table.select(slice(start, start + WORK_ROWS)))
            if step is not None:
                yield step

    def _feed(self, table: EmitterTable) -> LinkStep | None:
        if self._names is None:
            self._names = table.names
            self._axes = tuple(a for a in AXES if SIGMAS[a] in table)
        elif table.names != self._names:
            raise StackError(f"link: a chunk has the columns {table.names}, the first had {self._names}")
        if self._held is not None:
            table = EmitterTable.concat([self._held, table])
        frame = table["frame"]
        if np.any(frame[1:] < frame[:-1]):
            table = table.sorted_by_frame()
            frame = table["frame"]
        if self._last_frame is not None and frame[0] <= self._last_frame:
            raise StackError(f"link: the localizations are not in frame order (frame {frame[0] + 1} after frame "
                             f"{self._last_frame + 1}); sort them by frame first")
        if frame[0] == frame[-1]:  # a single frame so far: wait for the next
            self._held = table
            return None
        cut = int(np.searchsorted(frame, frame[-1]))
        self._held = table.select(slice(cut, None))
        return self._link(table.select(slice(0, cut)))

    def finish(self) -> LinkStep:
        """Link the rows still held and close every molecule."""
        step = self._link(self._held) if self._held is not None and len(self._held) else self._empty_step()
        self._held = None
        rest = self._close(np.zeros(0 if self._open is None else len(self._open["group"]), bool))
        self._tail = None
        molecules = _concat_molecules([step.molecules, rest]) if len(rest) else step.molecules
        return LinkStep(step.rows, step.group, molecules, step.pairs)

    # -- one whole number of frames ---------------------------------------------------------------------------
    def _link(self, table: EmitterTable) -> LinkStep:
        self._last_frame = int(table["frame"][-1])
        new = self._columns(table)
        tail = self._tail if self._tail is not None else {k: v[:0] for k, v in new.items()}
        n_tail = len(tail["frame"])
        rows = {k: np.concatenate([tail[k], new[k]]) for k in new}
        pred, succ = self._links(rows, n_tail)
        # chain data: each new row's predecessor's weighted σ and frame (two levels for lag-2 cross terms)
        has = pred >= 0
        p = np.where(has, pred, 0)
        for a in self._axes:
            rows[f"p1{a}"][n_tail:] = np.where(has, rows[f"ws{a}"][p], 0.0)[n_tail:]
        rows["f1"][n_tail:] = np.where(has, rows["frame"][p], -1)[n_tail:]
        first_new = self._next_group
        rows["group"][n_tail:] = self._groups(pred, rows["group"], n_tail)
        sums = self._sums(rows, pred, n_tail, first_new)
        self._merge(sums)
        last = int(rows["frame"].max())
        keep = (succ < 0) & (rows["frame"] > last - self.max_dark - 1)
        self._tail = {k: v[keep] for k, v in rows.items()}
        still_open = np.isin(self._open["group"], self._tail["group"])
        molecules = self._close(still_open)
        pairs = None
        if self.with_pairs:
            linked = np.nonzero(has)[0]
            pairs = LinkPairs(lag=(rows["frame"][linked] - rows["frame"][pred[linked]]),
                              dx=rows["x"][linked] - rows["x"][pred[linked]],
                              dy=rows["y"][linked] - rows["y"][pred[linked]],
                              sx=np.stack([rows["sx"][pred[linked]], rows["sx"][linked]], axis=1),
                              sy=np.stack([rows["sy"][pred[linked]], rows["sy"][linked]], axis=1),
                              group=rows["group"][linked])
        return LinkStep(table, rows["group"][n_tail:].copy(), molecules, pairs)

    def _columns(self, table: EmitterTable) -> dict[str, np.ndarray]:
        """The working columns of the rows (float64 positions in px, weights, weighted σ per axis)."""
        n = len(table)
        w = np.maximum(table["photons"].astype(np.float64), 1.0)
        cols = {"frame": table["frame"], "x": table["x"].astype(np.float64), "y": table["y"].astype(np.float64),
                "z": table["z"].astype(np.float64), "w": w, "photons": table["photons"].astype(np.float64),
                "bg": table["bg"].astype(np.float64),
                "prob": table["prob"].astype(np.float64) if "prob" in table else np.full(n, np.nan),
                "group": np.full(n, -1, np.int64), "f1": np.full(n, -1, np.int64)}
        for a in AXES:
            s = table[SIGMAS[a]].astype(np.float64) if SIGMAS[a] in table else np.full(n, np.nan)
            cols[f"s{a}"] = s
            if a in self._axes:
                cols[f"ws{a}"] = w * s
                cols[f"p1{a}"] = np.zeros(n)
        return cols

    def _links(self, rows: dict[str, np.ndarray], n_tail: int) -> tuple[np.ndarray, np.ndarray]:
        """Greedy links (shortest frame gap, then distance, in σ with a gate): each row's predecessor and
        successor (-1: none)."""
        n = len(rows["frame"])
        pred = np.full(n, -1, np.int64)
        succ = np.full(n, -1, np.int64)
        window = self.max_dark + 1
        a, b = candidate_pairs(rows["x"], rows["y"], rows["frame"], self.reach, window)
        lag = rows["frame"][b] - rows["frame"][a]
        d2 = (rows["x"][a] - rows["x"][b]) ** 2 + (rows["y"][a] - rows["y"][b]) ** 2
        ok = (d2 <= self.reach ** 2) & (b >= n_tail)
        a, b, lag, d2 = a[ok], b[ok], lag[ok], d2[ok]
        ok = d2 <= self.radius ** 2
        if self.sigma_gate > 0:  # the gate and the order: the difference in combined σ (module docstring)
            d2 = self._in_sigma(rows, a, b, d2)
            ok |= d2 <= self.sigma_gate ** 2
        a, b, lag, d2 = a[ok], b[ok], lag[ok], d2[ok]
        for k in range(1, window + 1):  # all pairs of gap k come before those of gap k + 1
            at = lag == k
            ak, bk, dk = a[at], b[at], d2[at]
            free = (succ[ak] < 0) & (pred[bk] < 0)  # ends not linked at a shorter gap
            ak, bk, dk = ak[free], bk[free], dk[free]
            # a pair whose two ends are in no other pair of this gap is taken whatever the order: only the
            # others compete
            alone = (np.bincount(ak, minlength=n)[ak] == 1) & (np.bincount(bk, minlength=n)[bk] == 1)
            succ[ak[alone]] = bk[alone]
            pred[bk[alone]] = ak[alone]
            order = np.argsort(dk[~alone], kind="stable")  # shortest distance first
            ak, bk = ak[~alone][order], bk[~alone][order]
            while len(ak):
                # a pair is taken when it is the first remaining pair of both its ends (as greedy in this order
                # would)
                rank = np.arange(len(ak))
                first_a = np.full(n, len(ak))
                np.minimum.at(first_a, ak, rank)
                first_b = np.full(n, len(ak))
                np.minimum.at(first_b, bk, rank)
                take = (first_a[ak] == rank) & (first_b[bk] == rank)
                succ[ak[take]] = bk[take]
                pred[bk[take]] = ak[take]
                free = (succ[ak] < 0) & (pred[bk] < 0)
                ak, bk = ak[free], bk[free]
        return pred, succ

    def _in_sigma(self, rows: dict[str, np.ndarray], a: np.ndarray, b: np.ndarray, d2: np.ndarray) -> np.ndarray:
        """Each candidate's squared distance in combined σ; a pair without a usable σ (NaN, infinite or zero:
        its combined variance not finite and > 0) in radii, times the gate (it links within the radius only)."""
        vx = rows["sx"][a] ** 2 + rows["sx"][b] ** 2
        vy = rows["sy"][a] ** 2 + rows["sy"][b] ** 2
        usable = np.isfinite(vx) & np.isfinite(vy) & (vx > 0) & (vy > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            z2 = (rows["x"][a] - rows["x"][b]) ** 2 / vx + (rows["y"][a] - rows["y"][b]) ** 2 / vy
        return np.where(usable, z2, d2 / self.radius ** 2 * self.sigma_gate ** 2)

    def _groups(self, pred: np.ndarray, group: np.ndarray, n_tail: int) -> np.ndarray:
        """Molecule ids of the new rows: their chain's first row's (a tail row's, or a new id in row order)."""
        n = len(pred)
        root = np.where(pred >= 0, pred, np.arange(n))
        while True:  # pointer jumping: log2(chain length) passes
            nxt = root[root]
            if np.array_equal(nxt, root):
                break
            root = nxt
        group = group.copy()
        starts = np.nonzero((pred < 0) & (np.arange(n) >= n_tail))[0]
        group[starts] = self._next_group + np.arange(len(starts))
        self._next_group += len(starts)
        return group[root][n_tail:]

    def _sums(self, rows: dict[str, np.ndarray], pred: np.ndarray, n_tail: int,
              first_new: int) -> dict[str, np.ndarray]:
        """Per molecule of the new rows: their sums (module docstring), count, first and last frame. A new row's
        molecule is a tail row's (ids below ``first_new``) or one that starts here (``first_new`` on, in order)."""
        new = slice(n_tail, None)
        group = rows["group"][new]
        old = np.unique(group[group < first_new])  # tail molecules continued here
        groups = np.concatenate([old, np.arange(first_new, self._next_group)])
        inverse = np.where(group >= first_new, group - first_new + len(old),
                           np.searchsorted(old, np.minimum(group, first_new - 1)))
        m = len(groups)

        def total(values: np.ndarray) -> np.ndarray:
            return np.bincount(inverse, weights=values, minlength=m)

        w = rows["w"][new]
        out = {"group": groups, "n": np.bincount(inverse, minlength=m).astype(np.int64),
               "w": total(w), "wx": total(w * rows["x"][new]), "wy": total(w * rows["y"][new]),
               "wz": total(w * rows["z"][new]), "photons": total(rows["photons"][new]), "bg": total(rows["bg"][new])}
        first = np.full(m, np.iinfo(np.int64).max)
        np.minimum.at(first, inverse, rows["frame"][new])
        last = np.full(m, np.iinfo(np.int64).min)
        np.maximum.at(last, inverse, rows["frame"][new])
        out.update(first=first, last=last)
        if "prob" in (self._names or ()):
            prob = np.full(m, -np.inf)
            np.maximum.at(prob, inverse, rows["prob"][new])
            out["prob"] = prob
        # cross terms with the predecessor (lag 1 or more) and its predecessor, for lags with their own ρ
        p = np.where(pred >= 0, pred, 0)[new]
        has = (pred >= 0)[new]
        f = rows["frame"][new]
        lag1 = np.where(has, f - rows["frame"][p], 0)
        f1 = rows["f1"][p]
        lag2 = np.where(has & (f1 >= 0), f - f1, 0)
        rho = self.correlation
        extra1 = np.where(has, rho.at(lag1) - rho.beyond, 0.0)
        extra2 = np.where(lag2 > 0, rho.at(lag2) - rho.beyond, 0.0)
        for a in self._axes:  # a localization without σ makes its molecule's σ NaN
            ws = rows[f"ws{a}"][new]
            out[f"B{a}"] = total(ws)
            out[f"C{a}"] = total(ws * ws)
            out[f"E{a}"] = total(ws * (extra1 * rows[f"ws{a}"][p] + extra2 * rows[f"p1{a}"][p]))
        return out

    def _merge(self, sums: dict[str, np.ndarray]) -> None:
        """Add one chunk's sums into the open molecules (the tail's are open; the others are new)."""
        if self._open is None or len(self._open["group"]) == 0:
            self._open = sums
            return
        op = self._open
        idx = np.searchsorted(op["group"], sums["group"])
        idx_c = np.minimum(idx, len(op["group"]) - 1)
        known = op["group"][idx_c] == sums["group"]
        at, src = idx_c[known], np.nonzero(known)[0]
        for k in sums:
            if k in ("group", "first"):
                continue
            if k == "last":
                op[k][at] = np.maximum(op[k][at], sums[k][src])
            elif k == "prob":
                op[k][at] = np.fmax(op[k][at], sums[k][src])
            else:
                op[k][at] += sums[k][src]
        fresh = ~known
        self._open = {k: np.concatenate([op[k], sums[k][fresh]]) for k in op}
        g = self._open["group"]
        if np.any(g[1:] < g[:-1]):
            order = np.argsort(g, kind="stable")
            self._open = {k: v[order] for k, v in self._open.items()}

    def _close(self, still_open: np.ndarray) -> Molecules:
        """Molecules whose mask is False leave the open set and are returned."""
        if self._open is None:
            return self._no_molecules()
        done = {k: v[~still_open] for k, v in self._open.items()}
        self._open = {k: v[still_open] for k, v in self._open.items()}
        return self._molecules(done)

    def _molecules(self, s: dict[str, np.ndarray]) -> Molecules:
        rho = self.correlation.beyond
        w = s["w"]
        cols = {"frame": s["first"], "x": s["wx"] / w, "y": s["wy"] / w, "z": s["wz"] / w,
                "photons": s["photons"], "bg": s["bg"] / s["n"]}
        names = self._names or ()
        if "prob" in names:
            cols["prob"] = s["prob"]
        for a in self._axes:
            var = rho * s[f"B{a}"] ** 2 + (1 - rho) * s[f"C{a}"] + 2 * s[f"E{a}"]
            cols[SIGMAS[a]] = np.sqrt(np.maximum(var, 0.0)) / w
        return Molecules(EmitterTable(cols), s["group"], s["n"], s["last"] - s["first"] + 1)

    def _no_molecules(self) -> Molecules:
        names = [c for c in (self._names or ()) if c in ("prob", "sigma_x", "sigma_y", "sigma_z")]
        return Molecules(EmitterTable.empty(names), np.zeros(0, np.int64), np.zeros(0, np.int64),
                         np.zeros(0, np.int64))

    def _empty_step(self) -> LinkStep:
        names = self._names or EmitterTable.empty().names
        rows = EmitterTable({c: np.zeros(0) for c in names})
        none = np.zeros(0)
        return LinkStep(rows, np.zeros(0, np.int64), self._no_molecules(), None if not self.with_pairs else
                        LinkPairs(none.astype(np.int64), none, none, none.reshape(0, 2), none.reshape(0, 2),
                                  none.astype(np.int64)))


GRIDS = 3  # shifted grids: a pair closer than a third of the cell shares a cell in one of them (2-D: 3 grids)


def candidate_pairs(x: np.ndarray, y: np.ndarray, frame: np.ndarray, radius: float,
                    window: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair ``(a, b)`` of rows (frame-sorted) with ``1 <= frame[b] - frame[a] <= window`` and ``|dx|, |dy|
    <= radius``, once each, and some farther ones (the caller checks the distance).

    Three grids of cells ``3 * radius`` wide, shifted by a third of a cell along both axes: along each axis a
    pair's span (at most ``radius``) crosses the cell edges of at most one grid, so in 2-D they share a cell in
    one grid at least. Per grid one stable radix sort by a 16-bit bucket of the cell (the rows stay in frame order
    within a bucket); then row ``i`` is compared with row ``i + s`` for s = 1, 2, ... while some pair of one bucket
    is still within ``window`` frames. Shift s + 1 checks only the rows that had a bucket mate within the window
    at shift s: a bucket's rows are contiguous and in frame order, so a row without one at shift s has none
    farther on. A pair found in an earlier grid is not repeated."""
    cell = 3.0 * radius
    keys, buckets = [], []
    for g in range(GRIDS):  # per grid: each row's cell (one int64 key) and its 16-bit bucket
        gx = np.floor((x + g * cell / GRIDS) / cell).astype(np.int64)
        gy = np.floor((y + g * cell / GRIDS) / cell).astype(np.int64)
        buckets.append(((gx & 0xFF) << 8 | (gy & 0xFF)).astype(np.uint16))
        keys.append(gx << 32 ^ gy)
    frame32 = (frame - frame[0]).astype(np.int32) if len(frame) else frame.astype(np.int32)
    found_a, found_b = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for g in range(GRIDS):
        order = np.argsort(buckets[g], kind="stable")
        bs, fs = buckets[g][order], frame32[order]
        live = np.zeros(0, np.int64)  # rows i whose bucket mate i + s is within the window (set at s = 1)
        for s in range(1, len(order)):
            if s == 1 or 4 * len(live) > len(order):  # every row (slices: cheaper than gathering most rows)
                df = fs[s:] - fs[:-s]
                live = np.nonzero((bs[s:] == bs[:-s]) & (df <= window))[0]
                df = df[live]
            else:
                live = live[live + s < len(order)]
                df = fs[live + s] - fs[live]
                near = (bs[live + s] == bs[live]) & (df <= window)
                live, df = live[near], df[near]
            if not len(live):
                break
            hit = live[df > 0]
            a, b = order[hit], order[hit + s]
            keep = keys[g][a] == keys[g][b]
            for h in range(g):  # found in an earlier grid already
                keep &= keys[h][a] != keys[h][b]
            found_a.append(a[keep])
            found_b.append(b[keep])
    return np.concatenate(found_a), np.concatenate(found_b)



def _concat_molecules(parts: list[Molecules]) -> Molecules:
    parts = [p for p in parts if len(p)] or parts[:1]
    return Molecules(EmitterTable.concat([p.table for p in parts]), np.concatenate([p.group for p in parts]),
                     np.concatenate([p.n for p in parts]), np.concatenate([p.length for p in parts]))


def link_table(table: EmitterTable, radius: float, max_dark: int = 1,
               correlation: ErrorCorrelation = INDEPENDENT, *, sigma_gate: float = 0.0,
               reach: float | None = None) -> tuple[np.ndarray, Molecules]:
    """Link a whole table in memory: each row's molecule id (in the table's row order) and the molecules
    (by id)."""
    order = np.argsort(table["frame"], kind="stable")
    linker = Linker(radius, max_dark, correlation, sigma_gate=sigma_gate, reach=reach)
    steps = [*linker.feed(table.select(order)), linker.finish()]
    group = np.empty(len(table), np.int64)
    group[order] = np.concatenate([s.group for s in steps])
    molecules = _concat_molecules([s.molecules for s in steps])
    by_id = np.argsort(molecules.group, kind="stable")
    return group, Molecules(molecules.table.select(by_id), molecules.group[by_id], molecules.n[by_id],
                            molecules.length[by_id])
