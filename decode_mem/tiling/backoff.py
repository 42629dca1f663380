"""Out-of-memory back-off: the sizes a run computes with now, and how they shrink when a block runs out of memory.

On an out-of-memory error the block is redone with half the batch, then half the chunk (the retry runs outside
the ``except`` block, whose traceback pins the failed tensors), at most ``TileConfig.max_retries`` times per block.
The results are those of an uninterrupted run up to float rounding: a smaller batch may change a convolution's
summation order.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from decode_mem.errors import DecodeMemError, exception_line
from decode_mem.tiling.grid import TileGrid

T = TypeVar("T")


class DeviceMemoryError(DecodeMemError, MemoryError):
    """Out of memory even at the smallest tiles and batch the executor will try."""


def is_oom(exc: BaseException) -> bool:
    """CUDA / accelerator OOM, or the CPU allocator failing."""
    torch = sys.modules.get("torch")  # not loaded: none of its errors can have been raised
    return (torch is not None and isinstance(exc, torch.OutOfMemoryError)) or (
        isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc))


class BackOff:
    """The current tile grid and batch of one executor, shrunk by ``shrink`` after an out-of-memory error.

    ``grid_for(chunk)`` builds the tile grid for a chunk size; ``chunk_size`` is the chunk asked for (the grid
    rounds it down to a multiple of ``factor``), then the chunk last shrunk to. ``log`` holds one line per
    back-off.
    """

    def __init__(self, grid_for: Callable[[int], TileGrid], chunk_size: int, batch_size: int, *, factor: int,
                 max_retries: int, device: Any) -> None:
        self.grid_for, self.factor, self.max_retries, self.device = grid_for, factor, max_retries, device
        self.chunk_size, self.batch_size = int(chunk_size), int(batch_size)
        self.grid = grid_for(self.chunk_size)
        self.log: list[str] = []

    def sizes(self) -> tuple[int, int]:
        """(chunk, batch) now: equal before and after a block only if no back-off happened in between."""
        return self.grid.chunk, self.batch_size

    def retry(self, attempt: Callable[[int], T], t0: int, retries: int = 0) -> T:
        """``attempt(retries)`` until it does not run out of memory, shrinking the sizes before each retry
        (``retries``: back-offs of this block so far). Other errors propagate."""
        while True:
            try:
                return attempt(retries)
            except RuntimeError as e:  # torch.OutOfMemoryError is one
                if not is_oom(e):
                    raise
                failure = exception_line(e)
            # here, outside the except block, the failed attempt's traceback and tensors are gone
            retries += 1
            self.shrink(t0, retries, failure)

    def shrink(self, t0: int, retries: int, failure: str) -> None:
        """Halve the batch, or where it is 1 the chunk; DeviceMemoryError after ``max_retries`` back-offs of one
        block or when nothing can shrink. ``t0``: the block's first frame, for the messages."""
        gc.collect()  # frames of the failed attempt may sit in reference cycles
        if self.device.type == "cuda":
            import torch

            torch.cuda.empty_cache()  # once, after an OOM: hand the failed attempt's blocks back
        before = f"batch {self.batch_size}, tiles {self.grid.tile_shape[0]}x{self.grid.tile_shape[1]}"
        if retries > self.max_retries:
            shrunk = False
        elif self.batch_size > 1:
            self.batch_size, shrunk = self.batch_size // 2, True
        else:
            shrunk = self._shrink_chunk()
        if not shrunk:
            raise DeviceMemoryError(
                f"out of memory on {self.device} at frame {t0} with {before} after {retries - 1} back-off(s) "
                f"({failure.splitlines()[0]}); free device memory, use amp='bf16' or a smaller model")
        after = f"batch {self.batch_size}, tiles {self.grid.tile_shape[0]}x{self.grid.tile_shape[1]}"
        self.log.append(f"frame {t0}: out of memory with {before}; retrying with {after}")

    def _shrink_chunk(self) -> bool:
        """Halve the chunk until the tiles actually get smaller; False when they cannot."""
        chunk, shape = self.grid.chunk, self.grid.tile_shape
        while chunk > self.factor:
            chunk = max(self.factor, chunk // 2 // self.factor * self.factor)
            grid = self.grid_for(chunk)
            if grid.tile_shape[0] * grid.tile_shape[1] < shape[0] * shape[1]:
                self.grid, self.chunk_size = grid, chunk
                return True
        return False
