"""Blocks of frames: how many frames a block holds (``block_length``), where they come from (``FrameSource``,
``ArrayStack``) and what the executor hands out per block (``BlockResult``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from decode_mem.errors import ConfigError
from decode_mem.io.blocks import edge_blocks

BLOCK_BYTES = 64 * 2**20  # 'auto' block: about this much raw input per block ...
BLOCK_RANGE = (4, 256)  # ... within these many frames
STREAM_ROUNDS = 4  # 'auto' block with streams: at least this many blocks per stream ...
STREAM_BLOCK_MIN = 16  # ... unless blocks would get shorter than this (each recomputes its two context frames)
CPU_BLOCK_PIXELS = 2**21  # 'auto' block of a run on a CPU: at most about this many pixels (32 frames of 256²,
# seconds of a 2-core CPU's work): a kill loses at most the block in hand, a stop waits for it. Its cost against
# 256-frame blocks (two context frames recomputed per block) is not in a benchmark report: one ad-hoc pair of runs
# (600 frames of 256²) showed no slowdown


def block_length(frame_shape: tuple[int, ...], itemsize: int, block: int | str = "auto", streams: int = 1,
                 max_pixels: int | None = None) -> int:
    """Frames per block: ``block`` itself, or for 'auto' about ``BLOCK_BYTES`` of raw (H, W) frames and, with
    ``max_pixels`` (``CPU_BLOCK_PIXELS`` for a run on a CPU), at most that many pixels (never under
    ``STREAM_BLOCK_MIN`` frames: each block recomputes its two context frames).

    With ``streams > 1`` and a ``(T, H, W)`` shape, 'auto' blocks are also short enough to give each stream
    ``STREAM_ROUNDS`` blocks: the last block runs alone, so a stack cut into few long blocks spends much of its
    time on one block at a time (400 frames in 256-frame blocks ran slower on two streams than on one, measured
    when that last block still ran on one stream's share of the threads).
    """
    if block != "auto":
        return int(block)
    h, w = frame_shape[-2:]
    n = int(np.clip(BLOCK_BYTES // (h * w * itemsize), *BLOCK_RANGE))
    if max_pixels is not None:
        n = min(n, max(STREAM_BLOCK_MIN, int(max_pixels) // (h * w)))
    if streams > 1 and len(frame_shape) == 3:
        n = min(n, max(STREAM_BLOCK_MIN, -(-int(frame_shape[0]) // (STREAM_ROUNDS * streams))))
    return n


class FrameSource(Protocol):
    """A ``(T, H, W)`` stack: ``decode_mem.io.Stack``, ``ArrayStack`` or anything with these two members."""

    shape: tuple[int, int, int]

    def blocks(self, length: int, context: int = 1) -> Iterator[tuple[int, np.ndarray]]: ...


@dataclass
class ArrayStack:
    """An in-memory ``(T, H, W)`` array (numpy or torch) as a frame source with ``blocks()``."""

    array: Any
    _frames: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        a = self.array.detach().cpu().numpy() if hasattr(self.array, "detach") else np.asarray(self.array)
        if a.ndim != 3 or 0 in a.shape:
            raise ConfigError(f"frames must be a non-empty (T, H, W) array, got shape {a.shape}")
        self._frames = a

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self._frames.shape)

    @property
    def dtype(self) -> np.dtype:
        return self._frames.dtype

    def blocks(self, length: int, context: int = 1) -> Iterator[tuple[int, np.ndarray]]:
        """``(t0, frames[t0 - context : t0 + n + context])``, the edge frame repeated beyond the ends."""
        return edge_blocks(lambda lo, hi: self._frames[lo:hi], len(self._frames), length, context)


def as_source(frames: Any) -> FrameSource:
    """A stack-like object as it is; a ``(T, H, W)`` numpy array or tensor wrapped in ``ArrayStack``."""
    if hasattr(frames, "blocks") and hasattr(frames, "shape"):
        return frames
    return ArrayStack(frames)


@dataclass(frozen=True)
class BlockResult:
    """One finished block: frames ``t0 .. t0 + n_frames - 1`` and what ``consume`` returned per (tile, run).

    ``results`` are in tile raster order, then frame order. ``chunk_size``/``batch_size`` are the sizes the
    block was finally computed with; ``retries`` counts its out-of-memory back-offs.
    """

    t0: int
    n_frames: int
    results: tuple[Any, ...]
    chunk_size: int
    batch_size: int
    retries: int = 0
    seconds: float = 0.0
