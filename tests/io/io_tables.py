"""Random emitter tables for the localization-format tests (a plain module: importable by the test files)."""

from __future__ import annotations

import numpy as np

from decode_mem.io.table import EmitterTable


def random_table(n: int, seed: int = 0, *, frames: int = 50, width: float = 63, height: float = 63,
                 z_max: float = 400, **extra: np.ndarray) -> EmitterTable:
    """``n`` emitters in ``frames`` frames of a ``width`` x ``height`` px field, z in ±``z_max`` nm."""
    rng = np.random.default_rng(seed)
    return EmitterTable.from_arrays(
        frame=rng.integers(0, frames, n), x=rng.uniform(0, width, n), y=rng.uniform(0, height, n),
        z=rng.uniform(-z_max, z_max, n), photons=rng.uniform(500, 5000, n), bg=rng.uniform(5, 50, n), **extra)
