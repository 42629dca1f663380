"""A zarr array that grows along time while it is read: frames are complete once their chunk is.

The writer may enlarge the array (``resize`` / ``append``) before or after it writes the chunks, and a chunk
file may be written in several parts (a chunk filled frame by frame is rewritten each time), so neither the
shape nor a chunk's presence proves that its frames are there. The safety margin is one chunk along time: the
frames of time-chunk k are complete once time-chunk k+1 exists (a sequential writer starts it only after k),
or when the acquisition is over (``poll(final=True)``: then every frame up to the last time-chunk in the store,
as ``open_stack`` reads the finished array, a chunk missing in between repaired and recorded, ``io.damage``).
Chunks are checked in the array's store (zarr v2 and v3, sharded arrays by their shards; OME-Zarr level 0 and
group members as ``open_stack`` picks them). A chunk that equals the fill value everywhere is not written by
zarr and counts as missing: camera frames always hold the camera baseline.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import EmptyStackError, StackError
from decode_mem.io._zarr import chunk_exists, storage_grid
from decode_mem.io.damage import DamageLog
from decode_mem.io.stack import Stack


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
        self._damage = DamageLog()

    def activity(self) -> tuple:
        return self._activity

    @property
    def damage(self) -> DamageLog:
        """What the stacks read so far repaired (``Stack.damage``; a new stack is opened at every poll)."""
        if self.stack is not None:
            self._damage.extend(self.stack.damage.records)
        return self._damage

    def poll(self, final: bool = False) -> int:
        if self.stack is not None:
            self._damage.extend(self.stack.damage.records)
            self.stack.close()
            self.stack = None
        try:
            # re-read the metadata: the shape grows. No damage budget: frames are localized as they arrive, so a
            # repair is said, as everywhere in --follow, not refused at the end (io.damage)
            self.stack = Stack(self.path, **{"max_damage": 1.0, **self.options})
            self.stack._trim = final  # while it grows, chunks are looked for here, not from the array's end
            self.stack._opened()
        except EmptyStackError:  # created with no frames yet (shape (0, H, W)): the writer appends them later
            return self.n
        except StackError:
            if self.n or final:  # metadata written before and now unreadable, or never written: an error
                raise
            return self.n  # the folder exists, its metadata not yet (the writer is creating the array)
        src, layout = self.stack._opened()
        array = src.array
        grid = storage_grid(array)
        step = grid[layout.frame] if layout.frame is not None else 1
        length = self.stack.shape[0]
        while self.present * step < length and self._exists(array, layout, grid, self.present):
            self.present += 1
        complete = self.present if final else max(0, self.present - 1)
        # the end: every frame of the array, as open_stack reads it (a chunk missing in the middle is repaired)
        self.n = max(self.n, length if final else min(length, complete * step))
        if self.frame_shape is None and self.n:
            self.frame_shape, self.dtype = tuple(self.stack.shape[1:]), self.stack.dtype
        self._activity = (length, self.present)
        return self.n

    @staticmethod
    def _exists(array: Any, layout: Any, grid: tuple[int, ...], k: int) -> bool:
        coords = [0] * len(grid)
        for axis, index in layout.fixed:
            coords[axis] = index // grid[axis]
        if layout.frame is not None:
            coords[layout.frame] = k
        return chunk_exists(array, tuple(coords))

    def read(self, lo: int, hi: int) -> np.ndarray:
        return self.stack.read(lo, hi)

    def release(self, before: int) -> None:
        """Nothing is kept per frame."""

    def close(self) -> None:
        if self.stack is not None:
            self.stack.close()
