"""The detection probability of every pixel and frame as a zarr v3 array, written block by block.

``<stem>_prob.zarr``: ``(T, H, W)`` float16, ``p = sigmoid(p_logit)`` of the network (what ``predict_stack``
thresholds after summing it over a pixel's neighbours), chunks of one block of frames, opened by napari or
zarr directly. Only one block of frames is held (``(n, H, W)`` float16); the store is written under a
``.partial`` name and renamed when complete. With ``keep_on_error`` (a run with a journal) a stopped or killed run
leaves that partial store, and the resumed run (``start_at``) writes its remaining frames into it.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from decode_mem.errors import exception_line
from decode_mem.io.atomic import partial_path, remove_path
from decode_mem.model.arrays import expit
from decode_mem.model.config import CHANNEL_INDEX
from decode_mem.tiling import Tile


class ProbabilityMap:
    """``with ProbabilityMap(path, (T, H, W), block) as pm: predict_stack(..., prob_map=pm)``."""

    def __init__(self, path: str | os.PathLike, shape: tuple[int, int, int], block: int,
                 keep_on_error: bool = False) -> None:
        self.path = Path(path)
        self.shape = tuple(int(v) for v in shape)
        self.block = max(1, min(int(block), self.shape[0]))
        self.keep_on_error = keep_on_error
        self.offset = 0  # the engine's frame 0 is this frame of the stack (a resumed run's first frame)
        self._array: Any = None
        self._buffer = np.zeros((self.block, *self.shape[1:]), np.float16)
        self._t0: int | None = None

    def start_at(self, frame: int) -> None:
        """A resumed run: frames before ``frame`` are in the partial store a stopped run left; the engine's frames
        start at ``frame``."""
        self.offset = int(frame)

    def __enter__(self) -> ProbabilityMap:
        import zarr

        tmp = partial_path(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.offset:
            try:
                array = zarr.open_array(store=str(tmp), mode="r+")
            except Exception as e:
                raise FileNotFoundError(f"{tmp}: the probability map of the frames before {self.offset} cannot "
                                        f"be resumed ({exception_line(e)}); run without --resume") from e
            if tuple(array.shape) != self.shape or tuple(array.chunks) != (self.block, *self.shape[1:]):
                raise ValueError(f"{tmp}: a probability map of another shape or block {array.shape}")
            self._array = array
            return self
        remove_path(tmp)
        self._array = zarr.create_array(store=str(tmp), shape=self.shape, chunks=(self.block, *self.shape[1:]),
                                        dtype="float16", fill_value=0, zarr_format=3,
                                        dimension_names=("t", "y", "x"),
                                        attributes={"decode_mem": "detection probability sigmoid(p_logit)"})
        return self

    def add(self, tile: Tile, frames: np.ndarray, output: Any) -> None:
        """The core of one tile's output ``(len(frames), 10, *keep)`` for frames ``frames`` (global, 0-based)."""
        cy, cx = tile.core_in_keep
        logit = output[:, CHANNEL_INDEX["p_logit"], cy, cx]
        if isinstance(logit, np.ndarray):  # a CPU runtime's output
            p = expit(logit.astype(np.float32))
        else:
            import torch

            p = torch.sigmoid(logit.float()).cpu().numpy()
        if self._t0 is None:
            self._t0 = int(frames[0])
        rows = np.asarray(frames) - self._t0
        if rows.max() >= len(self._buffer):  # a longer block than planned: grow (one block is all that is held)
            self._buffer = np.zeros((int(rows.max()) + 1, *self.shape[1:]), np.float16)
        self._buffer[rows, tile.core[0], tile.core[1]] = p

    def flush(self, t0: int, n_frames: int) -> None:
        """Frames ``t0 .. t0 + n_frames - 1`` are complete: write them (one chunk for a full block)."""
        t0 += self.offset
        self._array[t0:t0 + n_frames] = self._buffer[:n_frames]
        self._t0 = None

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._array = None
        tmp = partial_path(self.path)
        if exc_type is not None:
            if not self.keep_on_error:
                remove_path(tmp)
            return
        remove_path(self.path)
        os.replace(tmp, self.path)
