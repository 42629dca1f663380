"""The detection probability of every pixel and frame as a zarr v3 array, written block by block.

``<stem>_prob.zarr``: ``(T, H, W)`` float16, ``p = sigmoid(p_logit)`` of the network (what ``predict_stack``
thresholds after summing it over a pixel's neighbours), chunks of one block of frames, opened by napari or
zarr directly. Only one block of frames is held (``(n, H, W)`` float16); the store is written under a
``.partial`` name and renamed when complete.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import torch

from decode_mem.io.atomic import atomic_output
from decode_mem.model.config import CHANNEL_INDEX
from decode_mem.tiling import Tile


class ProbabilityMap:
    """``with ProbabilityMap(path, (T, H, W), block) as pm: predict_stack(..., prob_map=pm)``."""

    def __init__(self, path: str | os.PathLike, shape: tuple[int, int, int], block: int) -> None:
        self.path = Path(path)
        self.shape = tuple(int(v) for v in shape)
        self.block = max(1, min(int(block), self.shape[0]))
        self._atomic = ExitStack()
        self._array: Any = None
        self._buffer = np.zeros((self.block, *self.shape[1:]), np.float16)
        self._t0: int | None = None

    def __enter__(self) -> ProbabilityMap:
        import zarr

        tmp = self._atomic.enter_context(atomic_output(self.path))
        self._array = zarr.create_array(store=str(tmp), shape=self.shape, chunks=(self.block, *self.shape[1:]),
                                        dtype="float16", fill_value=0, zarr_format=3,
                                        dimension_names=("t", "y", "x"),
                                        attributes={"decode_mem": "detection probability sigmoid(p_logit)"})
        return self

    def add(self, tile: Tile, frames: np.ndarray, output: torch.Tensor) -> None:
        """The core of one tile's output ``(len(frames), 10, *keep)`` for frames ``frames`` (global, 0-based)."""
        cy, cx = tile.core_in_keep
        p = torch.sigmoid(output[:, CHANNEL_INDEX["p_logit"], cy, cx].float()).cpu().numpy()
        if self._t0 is None:
            self._t0 = int(frames[0])
        rows = np.asarray(frames) - self._t0
        if rows.max() >= len(self._buffer):  # a longer block than planned: grow (one block is all that is held)
            self._buffer = np.zeros((int(rows.max()) + 1, *self.shape[1:]), np.float16)
        self._buffer[rows, tile.core[0], tile.core[1]] = p

    def flush(self, t0: int, n_frames: int) -> None:
        """Frames ``t0 .. t0 + n_frames - 1`` are complete: write them (one chunk for a full block)."""
        self._array[t0:t0 + n_frames] = self._buffer[:n_frames]
        self._t0 = None

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._array = None
        self._atomic.__exit__(exc_type, exc, tb)
