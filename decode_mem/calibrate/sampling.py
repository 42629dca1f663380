"""Which frames of a movie a measurement reads: runs spread evenly over it (the calibration's spots), or single
frames far apart (the pixels' cumulants, whose frames must not share their emitters)."""

from __future__ import annotations

import math

import numpy as np

DEFAULT_FRAMES = 200
RUN_FRAMES = 20


def sample_runs(n_frames: int, frames: int = DEFAULT_FRAMES, run: int = RUN_FRAMES) -> list[tuple[int, int]]:
    """Runs ``(t0, t1)`` of up to ``run`` consecutive frames, ``frames`` in all, spread evenly over the movie
    (all frames, cut into runs, when the movie has no more than ``frames``)."""
    if frames < 1:
        raise ValueError(f"frames must be >= 1, got {frames}")
    if n_frames <= frames:
        return [(t, min(t + run, n_frames)) for t in range(0, n_frames, run)]
    run = min(run, frames)
    n_runs = math.ceil(frames / run)
    starts = np.unique(np.round(np.linspace(0, n_frames - run, n_runs)).astype(int))
    return [(int(t), int(t) + run) for t in starts]
