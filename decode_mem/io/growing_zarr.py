"""A zarr array that grows along time while it is read: frames are complete once their chunk is.

The writer may enlarge the array (``resize`` / ``append``) before or after it writes the chunks, and a chunk
file may be written in several parts (a chunk filled frame by frame is rewritten each time), so neither the
shape nor a chunk's presence proves that its frames are there. The safety margin is one chunk along time: the
frames of time-chunk k are complete once time-chunk k+1 exists (a sequential writer starts it only after k),
or when the acquisition is over (``poll(final=True)``). Frames beyond the last chunk present are never read.
Chunks are checked in the array's store (zarr v2 and v3, sharded arrays by their shards; OME-Zarr level 0 and
group members as ``open_stack`` picks them). A chunk that equals the fill value everywhere is not written by
zarr and counts as missing: camera frames always hold the camera baseline.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import EmptyStackError
from decode_mem.io.stack import Stack, open_stack


class GrowingZarr:
    """``poll()`` -> frames complete so far; ``read(lo, hi)`` reads complete frames only."""

    def __init__(self, path: str | os.PathLike, **options: Any) -> None:
        self.path = Path(path)
        self.options = options
        self.stack: Stack | None = None
        self.present = 0  # time-chunks 0 .. present-1 exist
        self.n = 0
        self.frame_shape: tuple[int, int] | None = None
        self.dtype: np.dtype | None = None
        self.warnings: list[str] = []
        self._activity: tuple = ()

    def activity(self) -> tuple:
        return self._activity

    def poll(self, final: bool = False) -> int:
        if self.stack is not None:
            self.stack.close()
            self.stack = None
        try:
            self.stack = open_stack(self.path, **self.options)  # re-read the metadata: the shape grows
        except EmptyStackError:  # created with no frames yet (shape (0, H, W)): the writer appends them later
            return self.n
        src, layout = self.stack._opened()
        array = src.array
        grid = getattr(array, "shards", None) or array.chunks
        step = grid[layout.frame] if layout.frame is not None else 1
        length = self.stack.shape[0]
        while self.present * step < length and self._exists(array, layout, grid, self.present):
            self.present += 1
        complete = self.present if final else max(0, self.present - 1)
        self.n = max(self.n, min(length, complete * step))
        if self.frame_shape is None and self.n:
            self.frame_shape, self.dtype = tuple(self.stack.shape[1:]), self.stack.dtype
        self._activity = (length, self.present)
        return self.n

    @staticmethod
    def _exists(array: Any, layout: Any, grid: tuple[int, ...], k: int) -> bool:
        from zarr.core.sync import sync

        coords = [0] * len(grid)
        for axis, index in layout.fixed:
            coords[axis] = index // grid[axis]
        if layout.frame is not None:
            coords[layout.frame] = k
        key = array.metadata.encode_chunk_key(tuple(coords))
        return bool(sync(array.store.exists(f"{array.path}/{key}" if array.path else key)))

    def read(self, lo: int, hi: int) -> np.ndarray:
        return self.stack.read(lo, hi)

    def release(self, before: int) -> None:
        """Nothing is kept per frame."""

    def close(self) -> None:
        if self.stack is not None:
            self.stack.close()
