"""``io.first_frames``: the mean of a stack's first frames summed as a reader passes them (the report's widefield
image without reading them again)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import tifffile

from decode_mem.io.first_frames import FirstFramesMean, SummingReads
from decode_mem.io.stack import open_stack
from decode_mem.render import mean_frame

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample" / "stack.tif"  # 200 frames of 64²


@pytest.mark.parametrize("limit", [1, 7, 16, 200, 1000])
def test_the_first_frames_read_block_by_block_give_the_files_mean_frame(limit) -> None:
    """Blocks with context frames (repeated at the stack's start): only the frames themselves are summed, the first
    ``limit`` of them, whatever block the limit falls in; the blocks pass through unchanged."""
    first = FirstFramesMean(limit)
    with open_stack(SAMPLE) as stack:
        source = SummingReads(stack, first)
        assert source.shape == stack.shape and source.dtype == stack.dtype  # the stack's own attributes
        passed = [(t0, frames.copy()) for t0, frames in source.blocks(16, context=1)]
        direct = list(stack.blocks(16, context=1))
        want = mean_frame(stack, max_frames=min(limit, stack.shape[0]))
    np.testing.assert_array_equal(want, tifffile.imread(SAMPLE)[:limit].mean(axis=0, dtype=np.float64))  # exact sums
    assert [t0 for t0, _ in passed] == [t0 for t0, _ in direct]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(passed, direct, strict=True))
    got, n = first.mean()
    assert n == min(limit, 200)
    np.testing.assert_array_equal(got, want)  # the same float64 sums in the same order


def test_nothing_read_is_no_mean_and_the_mean_can_be_asked_from_another_thread() -> None:
    first = FirstFramesMean(5)
    assert first.mean() == (None, 0)
    frames = np.arange(2 * 3 * 4, dtype=np.uint16).reshape(2, 3, 4)
    reader = threading.Thread(target=lambda: [first.add(frames[i:i + 1]) for i in range(2)])
    reader.start()
    reader.join()
    mean, n = first.mean()
    assert n == 2 and mean.dtype == np.float64
    np.testing.assert_array_equal(mean, frames.mean(axis=0))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.float32])
def test_sums_are_exact_at_the_ends_of_the_frames_range(dtype) -> None:
    """Frames at their type's extremes summed over 1000 frames (32-bit integers for 16-bit ones): the exact mean."""
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "ui" else None
    value = info.max if info is not None else 65535.5
    low = info.min if info is not None else -3.25
    first = FirstFramesMean(1000)
    frames = np.empty((10, 2, 3), dtype)
    frames[:, 0], frames[:, 1] = value, low
    for _ in range(100):
        first.add(frames)
    mean, n = first.mean()
    assert n == 1000 and mean.dtype == np.float64
    np.testing.assert_array_equal(mean[0], float(value))
    np.testing.assert_array_equal(mean[1], float(low))
