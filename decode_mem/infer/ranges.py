"""Frame ranges of a stack as stacks of their own, so that a long stack can be split over workers.

A ``FrameRange`` of frames ``start .. stop-1`` yields blocks whose context frames at the range's ends are
the *real* neighbouring frames of the stack (frame ``start - 1`` and ``stop``); only at the stack's own
ends is the edge frame repeated (DESIGN.md §3). Ranges whose boundaries are multiples of the block length
give the very same blocks, hence the same network batches and the same emitters, as one pass over the
whole stack.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from decode_mem.io.blocks import edge_blocks


@dataclass(frozen=True)
class FrameRange:
    """Frames ``start .. stop-1`` of ``stack`` (anything with ``shape`` and ``read(t0, t1)`` or slicing).

    ``shape`` is ``(stop - start, H, W)``; ``blocks()`` yields range-local ``t0``: add ``start`` to frames.
    Pickles as the stack does (a ``decode_mem.io.Stack`` pickles as its path and options).
    """

    stack: Any
    start: int
    stop: int

    def __post_init__(self) -> None:
        n = self.stack.shape[0]
        if not 0 <= self.start < self.stop <= n:
            raise ValueError(f"FrameRange({self.start}, {self.stop}) outside a stack of {n} frames")

    @property
    def shape(self) -> tuple[int, int, int]:
        _, h, w = self.stack.shape
        return (self.stop - self.start, h, w)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(getattr(self.stack, "dtype", np.float32))

    def blocks(self, length: int, context: int = 1) -> Iterator[tuple[int, np.ndarray]]:
        """``(t0, frames)`` with ``t0`` local to the range and ``frames`` of shape ``(n + 2*context, H, W)``."""
        return edge_blocks(lambda lo, hi: np.asarray(self.stack[lo:hi]), self.stack.shape[0], length, context,
                           start=self.start, stop=self.stop)


def split_frames(n_frames: int, frames_per_task: int, block: int, start: int = 0) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering ``start .. n_frames`` (``start``: a multiple of ``block``, where a resumed
    run goes on); every boundary is a multiple of ``block``."""
    step = max(block, -(-frames_per_task // block) * block)
    return [(t0, min(t0 + step, n_frames)) for t0 in range(start, n_frames, step)]
