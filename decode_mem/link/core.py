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
        from decode_mem.link.kernels import follow_chains  # numba: imported where a link is made

        self._last_frame = int(table["frame"][-1])
        n_tail = 0 if self._tail is None else len(self._tail["frame"])
        rows = self._rows(table)
        pred, succ = self._links(rows, n_tail)
        first_new = self._next_group
        self._next_group = follow_chains(pred, rows["group"], rows["f1"], rows["frame"], rows["ws"], rows["p1"],
                                         n_tail, first_new)
        sums = self._sums(rows, pred, n_tail, first_new)
        last = int(rows["frame"].max())
        keep = (succ < 0) & (rows["frame"] > last - self.max_dark - 1)
        self._tail = {k: v[keep] for k, v in rows.items()}
        molecules = self._settle(sums, first_new, self._tail["group"])
        pairs = None
        if self.with_pairs:
            linked = np.nonzero(pred >= 0)[0]
            pairs = LinkPairs(lag=(rows["frame"][linked] - rows["frame"][pred[linked]]),
                              dx=rows["x"][linked] - rows["x"][pred[linked]],
                              dy=rows["y"][linked] - rows["y"][pred[linked]],
                              sx=np.stack([rows["sx"][pred[linked]], rows["sx"][linked]], axis=1),
                              sy=np.stack([rows["sy"][pred[linked]], rows["sy"][linked]], axis=1),
                              group=rows["group"][linked])
        return LinkStep(table, rows["group"][n_tail:].copy(), molecules, pairs)

    def _rows(self, table: EmitterTable) -> dict[str, np.ndarray]:
        """The working columns of the tail's rows followed by ``table``'s: float64 positions in px, weights
        ``w``, σ per axis, the weighted σ ``ws`` and the predecessor's ``p1`` (one column per axis with σ), the
        molecule ``group`` and the predecessor's frame ``f1`` (-1 until linked). Each column is allocated once and
        filled in place (no concatenation of the tail with the chunk)."""
        tail, n = self._tail, len(table)
        n_tail = 0 if tail is None else len(tail["frame"])
        k = len(self._axes)

        def column(name: str, dtype: type, new: np.ndarray | float, width: int | None = None) -> np.ndarray:
            out = np.empty((n_tail + n,) if width is None else (n_tail + n, width), dtype)
            if n_tail:
                out[:n_tail] = tail[name]
            out[n_tail:] = new
            return out

        given = table.columns  # a column the table lacks: NaN
        rows = {"frame": column("frame", np.int64, table["frame"])}
        for name in ("x", "y", "z", "photons", "bg", "prob"):
            rows[name] = column(name, np.float64, given.get(name, np.nan))
        for a in AXES:
            rows[f"s{a}"] = column(f"s{a}", np.float64, given.get(SIGMAS[a], np.nan))
        new_w = np.maximum(rows["photons"][n_tail:], 1.0)
        rows["w"] = column("w", np.float64, new_w)
        rows["group"] = column("group", np.int64, -1)
        rows["f1"] = column("f1", np.int64, -1)
        # the weighted σ and the predecessor's (set when linked)
        rows["ws"] = column("ws", np.float64, np.stack([new_w * rows[f"s{a}"][n_tail:] for a in self._axes], axis=1)
                            if k else 0.0, width=k)
        rows["p1"] = column("p1", np.float64, 0.0, width=k)
        return rows

    def _links(self, rows: dict[str, np.ndarray], n_tail: int) -> tuple[np.ndarray, np.ndarray]:
        """Greedy links (shortest frame gap, then distance, in σ with a gate): each row's predecessor and
        successor (-1: none); compiled (``link.kernels``)."""
        from decode_mem.link.kernels import greedy_links

        return greedy_links(rows["x"], rows["y"], rows["frame"], rows["sx"], rows["sy"], n_tail, self.radius,
                            self.reach, self.sigma_gate, self.max_dark + 1)

    def _sums(self, rows: dict[str, np.ndarray], pred: np.ndarray, n_tail: int,
              first_new: int) -> dict[str, np.ndarray]:
        """Per molecule of the new rows: their sums (module docstring; ``link.kernels.molecule_sums``), count,
        first and last frame. A new row's molecule is a tail row's (ids below ``first_new``) or one that starts
        here (``first_new`` on, in order)."""
        from decode_mem.link.kernels import molecule_sums

        group = rows["group"][n_tail:]
        old = np.unique(group[group < first_new])  # tail molecules continued here
        groups = np.concatenate([old, np.arange(first_new, self._next_group)])
        inverse = np.where(group >= first_new, group - first_new + len(old),
                           np.searchsorted(old, np.minimum(group, first_new - 1)))
        with_prob = "prob" in (self._names or ())
        count, first, last, fsum, best, b, c, e = molecule_sums(
            inverse, len(groups), n_tail, pred, rows["frame"], rows["f1"], rows["w"], rows["x"], rows["y"], rows["z"],
            rows["photons"], rows["bg"], rows["prob"] if with_prob else np.zeros(0), rows["ws"], rows["p1"],
            self.correlation.table())
        out = {"group": groups, "n": count, "first": first, "last": last, "w": fsum[0], "wx": fsum[1],
               "wy": fsum[2], "wz": fsum[3], "photons": fsum[4], "bg": fsum[5], "B": b, "C": c, "E": e}
        if with_prob:
            out["prob"] = best
        return out

    def _settle(self, sums: dict[str, np.ndarray], first_new: int, open_groups: np.ndarray) -> Molecules:
        """Add one chunk's sums (module docstring; ids below ``first_new``: molecules of the tail, open, the
        others new) into the open molecules; those not in ``open_groups`` (the new tail's) are complete and
        returned, in id order."""
        op = self._open if self._open is not None else {k: v[:0] for k, v in sums.items()}
        n_old = int(np.searchsorted(sums["group"], first_new))  # sums: the tail's molecules, then the new ones
        at = np.searchsorted(op["group"], sums["group"][:n_old])
        if n_old and (len(op["group"]) == 0
                      or not np.array_equal(op["group"][np.minimum(at, len(op["group"]) - 1)], sums["group"][:n_old])):
            raise RuntimeError("link: a molecule of the tail is not open (a bug: please report it)")
        for k, v in sums.items():
            if k in ("group", "first"):
                continue
            if k == "last":
                op[k][at] = np.maximum(op[k][at], v[:n_old])
            elif k == "prob":
                op[k][at] = np.fmax(op[k][at], v[:n_old])
            else:
                op[k][at] += v[:n_old]
        old_open = np.isin(op["group"], open_groups)
        new_open = np.isin(sums["group"][n_old:], open_groups)
        done = {k: np.concatenate([op[k][~old_open], sums[k][n_old:][~new_open]]) for k in op}
        self._open = {k: np.concatenate([op[k][old_open], sums[k][n_old:][new_open]]) for k in op}
        return self._molecules(done)

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
        for j, a in enumerate(self._axes):
            var = rho * s["B"][:, j] ** 2 + (1 - rho) * s["C"][:, j] + 2 * s["E"][:, j]
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


def candidate_pairs(x: np.ndarray, y: np.ndarray, frame: np.ndarray, radius: float,
                    window: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair ``(a, b)`` of rows (frame-sorted) with ``1 <= frame[b] - frame[a] <= window`` and a distance
    ``<= radius``, once each (compiled: ``link.kernels.window_pairs``)."""
    from decode_mem.link.kernels import window_pairs

    if not len(frame):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return window_pairs(np.ascontiguousarray(x, np.float64), np.ascontiguousarray(y, np.float64),
                        np.ascontiguousarray(frame, np.int64), float(radius), int(window), 0)


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
