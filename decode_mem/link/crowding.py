"""How crowded a movie is for linking, measured on its own localizations (no ground truth).

A link joins two localizations by position alone: wherever another emitter — or another blink of the same site —
is on within the radius in a frame next to a blink, no linker of that radius tells the two apart. How often that
happens is measured on the file itself: the fraction of localizations that have another within the radius
``LAG`` frames earlier, so long after that the same blink is over (on decode_mem's benchmark movies the fraction
falls with the lag and is flat from 20-50 frames on: benchmarks/results/postprocess.md) — the **chance-neighbour
rate** ``b``. A multi-frame blink has ``2 (max_dark + 1)`` frames before and after it in which a link can reach a
neighbour, so about ``1 - (1 - b)^(2 (max_dark + 1))`` of them have one there: **joinable**, the share of blinks
that any linker of this radius may merge with another. Above ``MERGE_GOAL`` the result is flagged: linked
molecule counts, and the precision read from linked differences, are then less reliable.

What it does not see: blends (two emitters on together closer than the PSF, localized as one spot between them),
which are single localizations, not neighbours. Emitters that stay on for about ``LAG`` / 5 frames or longer on
average count themselves as neighbours (exponential on-times of mean τ: ``exp(-LAG / τ)`` of them are still on
``LAG`` frames later, 0.5 % at τ = ``LAG`` / 5.3, which is where the flag starts).

Streamed: frames that are a multiple of ``EVERY`` are kept until the frame ``LAG`` later has been seen, so memory
holds ``LAG / EVERY`` frames' positions, whatever the movie's length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decode_mem.link.core import candidate_pairs

LAG = 100  # frames between a localization and the neighbours it is compared with
EVERY = 10  # every EVERY-th frame is a reference frame
MERGE_GOAL = 0.02  # joinable above this: flagged (issue goal: < 2 % of blinks merged with another emitter)
# joinable above this: most blinks have a neighbour a link reaches. On decode_mem's benchmark movies only the dense
# filaments pass it (0.98 at --no_truth's radius, against 0.07-0.15 on the rings and sparse filaments), and there
# the matched localizations split by true site resolve finer than their own true positions without error: emitters
# overlap so often that two FRC halves share blends (benchmarks/results/postprocess.md)
DENSE = 0.5
MIN_QUERIES = 100  # localizations compared, below which the rate is not stated


@dataclass(frozen=True)
class Crowding:
    """The chance-neighbour rate (``rate``: fraction of ``queries`` localizations with another within ``radius_nm``
    ``lag`` frames earlier; None where fewer than ``MIN_QUERIES`` were compared) and what it means for linking
    with ``max_dark`` (module docstring)."""

    rate: float | None
    queries: int
    lag: int
    radius_nm: float
    max_dark: int

    @property
    def uncertainty(self) -> float | None:
        """Binomial standard error of ``rate`` (neighbours of one structure are not independent: a lower bound)."""
        if self.rate is None:
            return None
        return float(np.sqrt(max(self.rate * (1 - self.rate), 1.0 / self.queries) / self.queries))

    @property
    def joinable(self) -> float | None:
        """The share of multi-frame blinks with a chance neighbour in a frame a link reaches."""
        return None if self.rate is None else float(1 - (1 - self.rate) ** (2 * (self.max_dark + 1)))

    @property
    def crowded(self) -> bool:
        return self.joinable is not None and self.joinable > MERGE_GOAL

    @property
    def dense(self) -> bool:
        """Most multi-frame blinks have a chance neighbour a link reaches (``DENSE``): an FRC is optimistic."""
        return self.joinable is not None and self.joinable > DENSE

    def warning(self, path: object) -> str:
        """The one line that says what a crowded result means."""
        return (f"{path}: crowded for linking: {100 * self.rate:.1f} % of localizations have another within the "
                f"link radius ({self.radius_nm:.1f} nm) {self.lag} frames earlier, so about {100 * self.joinable:.0f} "
                f"% of multi-frame blinks have a neighbour a link can reach (another emitter or another blink of "
                f"the same site): molecule counts and the precision from linked differences are less reliable")

    def dense_warning(self, path: object) -> str:
        """The one line that says what a dense result means for an FRC."""
        return (f"{path}: dense: most blinks have another emitter within the link radius next to them, so the two "
                f"FRC halves share blends of emitters on together: the FRC resolution reads finer than the "
                f"localizations resolve")

    def as_dict(self) -> dict[str, object]:
        def num(v: float | None) -> float | None:
            return None if v is None else round(v, 5)

        return {"chance_neighbour_rate": num(self.rate), "chance_neighbour_uncertainty": num(self.uncertainty),
                "chance_neighbour_lag_frames": self.lag, "chance_neighbour_queries": self.queries,
                "joinable_fraction": num(self.joinable), "crowded_for_linking": self.crowded,
                "dense": self.dense}


class ChanceNeighbours:
    """Streams localizations (frame order across calls) and counts the chance neighbours (module docstring).
    ``radius`` in the table's units; ``radius_nm`` for the result."""

    def __init__(self, radius: float, radius_nm: float, max_dark: int, lag: int = LAG, every: int = EVERY) -> None:
        self.radius, self.radius_nm, self.max_dark = float(radius), float(radius_nm), int(max_dark)
        self.lag, self.every = int(lag), int(every)
        self._refs: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # reference frame -> its x, y
        self._first: int | None = None  # the first frame seen: reference frames before it are not in the movie
        self._last = -1
        self.queries = self.hits = 0

    def add(self, x: np.ndarray, y: np.ndarray, frame: np.ndarray) -> None:
        """The next localizations (frames not before those already given)."""
        if not len(frame):
            return
        frame = np.asarray(frame, np.int64)
        if np.any(frame[1:] < frame[:-1]):
            order = np.argsort(frame, kind="stable")
            x, y, frame = x[order], y[order], frame[order]
        if self._first is None:
            self._first = int(frame[0])
        at = np.nonzero(frame % self.every == 0)[0]
        frames, starts = np.unique(frame[at], return_index=True)
        for f, xs, ys in zip(frames, np.split(np.asarray(x[at], np.float64), starts[1:]) if len(at) else [],
                             np.split(np.asarray(y[at], np.float64), starts[1:]) if len(at) else [], strict=True):
            old = self._refs.get(int(f))  # a frame split across calls is appended to
            self._refs[int(f)] = (xs, ys) if old is None else (np.concatenate([old[0], xs]),
                                                               np.concatenate([old[1], ys]))
        back = frame - self.lag
        query = (back % self.every == 0) & (back >= self._first)
        if np.any(query):
            self._count(np.asarray(x[query], np.float64), np.asarray(y[query], np.float64), back[query])
        self._last = max(self._last, int(frame[-1]))  # sorted above
        for f in [f for f in self._refs if f + self.lag < self._last]:  # every row of frame f + lag seen
            del self._refs[f]

    def _count(self, x: np.ndarray, y: np.ndarray, back: np.ndarray) -> None:
        """Per query row: another within the radius in its reference frame ``back``? One pass for all: reference
        k's rows get frame 2k, its queries 2k + 1, and only those pairs count."""
        frames = np.unique(back)
        rx = [self._refs.get(int(f), (np.zeros(0), np.zeros(0))) for f in frames]
        k_ref = np.repeat(np.arange(len(frames)), [len(r[0]) for r in rx])
        k_query = np.searchsorted(frames, back)
        xs = np.concatenate([*(r[0] for r in rx), x])
        ys = np.concatenate([*(r[1] for r in rx), y])
        fs = np.concatenate([2 * k_ref, 2 * k_query + 1])
        order = np.argsort(fs, kind="stable")
        a, b = candidate_pairs(xs[order], ys[order], fs[order], self.radius, 1)
        a, b = order[a], order[b]
        near = (fs[a] % 2 == 0) & (fs[b] == fs[a] + 1)
        near &= (xs[a] - xs[b]) ** 2 + (ys[a] - ys[b]) ** 2 <= self.radius ** 2
        self.queries += len(x)
        self.hits += len(np.unique(b[near]))

    def result(self) -> Crowding:
        rate = self.hits / self.queries if self.queries >= MIN_QUERIES else None
        return Crowding(rate, self.queries, self.lag, self.radius_nm, self.max_dark)
