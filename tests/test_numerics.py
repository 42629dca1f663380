"""The suite's own comparisons (tests/numerics.py) fail where they must: non-finite output, a missing emitter."""

from __future__ import annotations

import numpy as np
import pytest
from numerics import SAME_MATH, assert_same_emitters, channel_error

from decode_mem.io.table import EmitterTable


def test_channel_error_scores_non_finite_output_as_infinitely_wrong() -> None:
    ref = np.random.default_rng(0).random((2, 10, 8, 8))
    assert channel_error(ref * (1 + 1e-7), ref) <= SAME_MATH
    for bad in (np.nan, np.inf, -np.inf):
        out = ref.copy()
        out[1, 3, 2, 2] = bad
        assert channel_error(out, ref) == np.inf, bad
        assert channel_error(np.full_like(ref, bad), ref) == np.inf, bad
    both = ref.copy()
    both[0, 0, 0, 0] = np.nan  # the reference has it in the same place: compared elsewhere as usual
    assert channel_error(both.copy(), both) == 0.0
    other = both.copy()
    other[0, 0, 0, 0], other[0, 0, 0, 1] = 1.0, np.nan  # a NaN moved
    assert channel_error(other, both) == np.inf
    with pytest.raises(ValueError, match="shapes differ"):
        channel_error(ref[:, :9], ref)


def _table(frame, x, prob) -> EmitterTable:
    n = len(frame)
    return EmitterTable({"frame": np.asarray(frame, np.int64), "x": np.asarray(x, np.float32),
                         "y": np.full(n, 5.0, np.float32), "z": np.zeros(n, np.float32),
                         "photons": np.full(n, 1000.0, np.float32), "bg": np.full(n, 100.0, np.float32),
                         "prob": np.asarray(prob, np.float32)})


def test_same_emitters_lets_only_fence_emitters_be_alone() -> None:
    thr, n = 0.5, 30
    a = _table(np.arange(n), np.full(n, 3.0), np.full(n, 0.9))
    assert_same_emitters(a, a, thr)
    fence = _table([*range(n), 0], [*np.full(n, 3.0), 7.0], [*np.full(n, 0.9), thr + 1e-5])
    assert_same_emitters(fence, a, thr)  # one on the threshold's fence, in one table only: allowed
    clear = _table([*range(n), 0], [*np.full(n, 3.0), 7.0], [*np.full(n, 0.9), 0.8])
    with pytest.raises(AssertionError, match="no partner"):
        assert_same_emitters(clear, a, thr)  # one clear of the threshold, in one table only
    with pytest.raises(AssertionError, match="no partner"):
        assert_same_emitters(a, clear, thr)  # the other way round
    moved = _table(np.arange(n), np.full(n, 3.0) + 0.01, np.full(n, 0.9))
    with pytest.raises(AssertionError, match="no partner"):
        assert_same_emitters(moved, a, thr)  # 1 nm at 100 nm/px: beyond 1e-3 px
    other_frame = _table(np.arange(n) + 1, np.full(n, 3.0), np.full(n, 0.9))
    with pytest.raises(AssertionError, match="no partner"):
        assert_same_emitters(other_frame, a, thr)
    with pytest.raises(AssertionError, match="off the fence"):
        assert_same_emitters(a.select(np.arange(5)), a.select(np.arange(5)), thr)  # too few to prove anything
