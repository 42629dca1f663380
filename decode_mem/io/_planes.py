"""An N-D array over a file's planes: what the microscope formats (ND2, CZI, LIF, SIF, NDTiff) hand ``open_stack``.

Their libraries read one image plane at a time (a frame of one channel at one z, position or scene). A
:class:`PlaneArray` names the *loop* axes (T, Z, C, ...: one index each picks a plane) and reads the planes a basic
index asks for through ``read_plane(index, ys, xs)``, so a read of ``k`` frames costs ``k`` plane reads and memory
for those frames only, whatever the length of the file.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

PlaneReader = Callable[[tuple[int, ...], slice, slice], np.ndarray]  # (loop index, ys, xs) -> (h, w)


class PlaneArray:
    """``shape = loop_shape + (H, W)``; indexing with ints and positive-step slices returns a fresh array.

    ``read_plane(index, ys, xs)`` gets one int per loop axis and the region (slices with a positive step, already
    bounded to the plane) and returns the ``(len(ys), len(xs))`` pixels; a reader that can only read whole planes
    crops them itself (``crop``).
    """

    def __init__(self, loop_shape: Sequence[int], plane_shape: Sequence[int], dtype: Any,
                 read_plane: PlaneReader) -> None:
        self.loop_shape = tuple(int(n) for n in loop_shape)
        self.shape = (*self.loop_shape, *(int(n) for n in plane_shape))
        self.ndim = len(self.shape)
        self.dtype = np.dtype(dtype)
        self.read_plane = read_plane

    def __getitem__(self, key: Any) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        key = key + (slice(None),) * (self.ndim - len(key))
        if len(key) != self.ndim:
            raise IndexError(f"{len(key)} indices for a {self.ndim}-D array")
        n_loop = len(self.loop_shape)
        picks: list[range | int] = []
        for k, n in zip(key[:n_loop], self.loop_shape, strict=True):
            picks.append(range(n)[k] if isinstance(k, slice) else _index(k, n))
        ys, xs = (slice(*k.indices(n)) if isinstance(k, slice) else slice(_index(k, n), _index(k, n) + 1)
                  for k, n in zip(key[n_loop:], self.shape[n_loop:], strict=True))
        if (ys.step or 1) < 0 or (xs.step or 1) < 0:
            raise IndexError("negative steps are not supported")
        region = (len(range(self.shape[-2])[ys]), len(range(self.shape[-1])[xs]))
        ranges = [p if isinstance(p, range) else range(p, p + 1) for p in picks]
        out = np.empty((*(len(r) for r in ranges), *region), self.dtype)
        for pos in itertools.product(*(range(len(r)) for r in ranges)):
            index = tuple(r[i] for r, i in zip(ranges, pos, strict=True))
            plane = self.read_plane(index, ys, xs)
            if plane.shape != region:
                raise ValueError(f"plane {index} read as {plane.shape}, expected {region}")
            out[pos] = plane
        drop = tuple(0 if isinstance(p, int) else slice(None) for p in picks)
        out = out[drop]
        post = tuple(0 if not isinstance(k, slice) else slice(None) for k in key[n_loop:])
        return out[(..., *post)]


def crop(plane: np.ndarray, ys: slice, xs: slice) -> np.ndarray:
    """The region of a whole plane a ``read_plane`` was asked for."""
    return plane[ys, xs]


def _index(k: Any, n: int) -> int:
    i = int(k)
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for an axis of size {n}")
    return i % n
