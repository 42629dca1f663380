"""Blinking statistics: tracks of a molecule over consecutive frames, its on-time and its brightness.

Localizations within ``LINK_RADIUS`` px in consecutive sampled frames are one molecule (nearest neighbour,
one to one). Frames are sampled in runs of consecutive frames, so a track can be cut by the end of a run
(or of the movie): it is *censored*. For a geometric track length (an exponential on-time, seen frame by
frame) the maximum-likelihood mean length with censoring is ``1/p``, ``p = ends / (ends + continuations)``
— each observed frame of a track either continues to the next frame or ends the track, and a censored
track contributes its continuations but no end.

A molecule's first and last frames are usually partly on; its *interior* frames (neither first nor last of
an uncensored stretch) are fully on, so their photons measure the flux (photons per full frame on), which is
what the simulator's ``photons_*`` describe.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.spatial import cKDTree

LINK_RADIUS = 1.0  # px
MAX_GAP = 1  # frames without a detection bridged within a track
MIN_ENDS = 5  # fewer observed track ends than this: the on-time is not measured (NaN)


@dataclass(frozen=True)
class Tracks:
    """``track`` id per localization; per track: ``length`` (frames), ``censored`` (its end not observed);
    ``interior`` marks localizations strictly inside a track (fully on frames)."""

    track: np.ndarray
    length: np.ndarray
    censored: np.ndarray
    interior: np.ndarray


def link(frame: np.ndarray, x: np.ndarray, y: np.ndarray, sampled: np.ndarray, n_frames: int,
         radius: float = LINK_RADIUS, gap: int = MAX_GAP) -> Tracks:
    """Link localizations (absolute ``frame``, ``x``, ``y`` px) into tracks over sampled frames, bridging up
    to ``gap`` frames without a detection (a missed detection does not end an on-period).

    ``sampled``: sorted absolute indices of the frames that were looked at; ``n_frames``: the movie's length.
    A track's length is the number of frames it spans.
    """
    n = len(frame)
    track = np.arange(n)
    last_frame = frame.copy()  # per track id: its latest frame and position so far
    by_frame = {int(f): np.nonzero(frame == f)[0] for f in np.unique(frame)}
    open_tracks: dict[int, np.ndarray] = {}  # frame -> localizations that ended a track there (still linkable)
    for f in sorted(by_frame):
        here = by_frame[f]
        candidates = np.concatenate([open_tracks.get(f - d, np.zeros(0, dtype=np.int64)) for d in range(1, gap + 2)])
        if len(candidates):
            tree = cKDTree(np.column_stack([x[candidates], y[candidates]]))
            pairs = tree.query_ball_point(np.column_stack([x[here], y[here]]), radius)
            rows = [i for i, p in enumerate(pairs) for _ in p]
            cols = [j for p in pairs for j in p]
            if rows:
                cost = np.full((len(here), len(candidates)), 1e6)
                # nearest in time first, then in space
                cost[rows, cols] = (f - frame[candidates[cols]]) + np.hypot(
                    x[here][rows] - x[candidates][cols], y[here][rows] - y[candidates][cols]) / (2 * radius)
                r, c = linear_sum_assignment(cost)
                good = cost[r, c] < 1e6
                joined = candidates[c[good]]
                track[here[r[good]]] = track[joined]
                for d in range(1, gap + 2):  # a joined localization is no longer the open end of its track
                    if f - d in open_tracks:
                        open_tracks[f - d] = np.setdiff1d(open_tracks[f - d], joined)
        open_tracks[f] = here
        open_tracks.pop(f - gap - 2, None)
    del last_frame
    ids, inverse = np.unique(track, return_inverse=True)
    last = np.full(len(ids), -1)
    first = np.full(len(ids), np.iinfo(np.int64).max)
    np.maximum.at(last, inverse, frame)
    np.minimum.at(first, inverse, frame)
    sampled_set = set(int(f) for f in sampled)
    # an end is observed only if the next gap + 1 frames were looked at (and exist)
    censored = np.array([any((f + d) not in sampled_set for d in range(1, gap + 2)) or f + gap + 1 >= n_frames
                         for f in last], dtype=bool)  # dtype: no tracks at all (a dark movie) stays boolean
    interior = (frame > first[inverse]) & (frame < last[inverse])
    return Tracks(inverse, last - first + 1, censored, interior)


@dataclass(frozen=True)
class OnTime:
    """Mean track length in frames (censoring-corrected) with its standard error, and the counts used."""

    frames: float
    se: float
    tracks: int
    ends: int


def on_time(tracks: Tracks) -> OnTime:
    """Censoring-aware maximum-likelihood mean track length (geometric model, see the module doc)."""
    ends = int((~tracks.censored).sum())
    continuations = int((tracks.length - 1).sum())
    trials = ends + continuations
    if ends < MIN_ENDS or trials == 0:
        return OnTime(float("nan"), float("nan"), len(tracks.length), ends)
    p = ends / trials
    se = float(np.sqrt(p * (1 - p) / trials) / p**2) if p < 1 else float(np.sqrt(1.0 / trials))
    return OnTime(1.0 / p, se, len(tracks.length), ends)
