"""A folder of frame files (one frame per file, or a few) as one movie: which file holds which frame, and what a
file that cannot be read counts as. ``open_stack`` of a folder (``open_folder``) and ``--follow``'s
``growing_folder.FrameFolder`` share it, so both read the same frames.

Files (``*.tif``, ``*.tiff``, ``*.npy``) are taken in natural name order (``frame_2`` before ``frame_10``); the
frames of one file follow each other. A file that cannot be read (or holds frames of another size or type) counts
as many frames as the first readable file holds (a camera writes the same number to every file); they are read as
flat frames and recorded (``io.damage``). Unreadable files at the very end are a write cut short: left out, with a
warning, as a TIFF cut by a crash ends with its last complete frame.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import StackError
from decode_mem.io._layout import FramesArray, Source

SUFFIXES = (".tif", ".tiff", ".npy")
_LAST_NUMBER = re.compile(r"^(.*?)(\d+)(\D*)$")


def natural_key(name: str) -> tuple:
    """``frame_2`` before ``frame_10``: digit runs compare as numbers."""
    return tuple(int(p) if p.isdigit() else p.lower() for p in re.split(r"(\d+)", name))


def frame_file(name: str) -> bool:
    return name.lower().endswith(SUFFIXES) and not name.startswith(".")


def next_name(name: str) -> str | None:
    """The name a numbering writer gives the file after ``name``: its last number plus one, padding kept."""
    m = _LAST_NUMBER.match(name)
    if m is None:
        return None
    digits = m[2]
    return f"{m[1]}{int(digits) + 1:0{len(digits)}d}{m[3]}"


class FolderFrames:
    """Frames -> (file, index in the file); files taken one after the other (``take``) in name order."""

    def __init__(self, path: Path, open_file: Callable[[Path], Any]) -> None:
        self.path = path
        self.open_file = open_file  # open_stack (passed in: io.stack opens folders through this module)
        self.frames: dict[int, tuple[Path, int]] = {}  # frame -> (file, index in the file), not yet released
        self.bad: dict[int, str] = {}  # frame -> why its file cannot be read (a flat frame is read instead)
        self.n = 0
        self.frame_shape: tuple[int, int] | None = None
        self.dtype: np.dtype | None = None
        self.per_file: int | None = None  # frames of the first readable file
        self.first_size: int | None = None
        self.pending: list[tuple[Path, str]] = []  # unreadable files before the first readable one
        self.warnings: list[str] = []

    def take(self, path: Path, size: int | None = None) -> None:
        """Add the frames of ``path`` (its header is read, except where it has the first readable file's size:
        then it holds as many frames; a damaged one is found when it is read)."""
        if self.per_file is not None and size is not None and size == self.first_size:
            self._add(path, self.per_file)
            return
        try:
            with self.open_file(path) as stack:
                shape, dtype = tuple(stack.shape), stack.dtype
        except StackError as e:
            self._unreadable(path, str(e))
            return
        if self.frame_shape is None:
            self.frame_shape, self.dtype, self.per_file = shape[1:], dtype, shape[0]
            self.first_size = path.stat().st_size if size is None else size
            for bad_path, why in self.pending:
                self._unreadable(bad_path, why)
            self.pending.clear()
        elif (shape[1:], dtype) != (self.frame_shape, self.dtype):
            self._unreadable(path, f"{path}: frames of {shape[1]}x{shape[2]} {dtype.name}, the movie's are "
                                   f"{self.frame_shape[0]}x{self.frame_shape[1]} {self.dtype.name}")
            return
        self._add(path, shape[0])

    def _add(self, path: Path, n: int) -> None:
        for i in range(n):
            self.frames[self.n + i] = (path, i)
        self.n += n

    def _unreadable(self, path: Path, why: str) -> None:
        if self.per_file is None:  # how many frames it stands for is known once a file could be read
            self.pending.append((path, why))
            return
        for i in range(self.per_file):
            self.bad[self.n + i] = f"its file cannot be read ({why})"
        self._add(path, self.per_file)

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Frames ``lo .. hi-1``; those of a file that cannot be read are 0 and in ``bad``."""
        out = np.zeros((hi - lo, *self.frame_shape), self.dtype)
        t = lo
        while t < hi:
            path, i = self.frames[t]
            n = 1
            if t not in self.bad:
                try:
                    with self.open_file(path) as stack:
                        n = max(1, min(hi - t, stack.shape[0] - i))
                        if tuple(stack.shape[1:]) != self.frame_shape:
                            raise StackError(f"{path}: its frames changed size")
                        out[t - lo:t - lo + n] = stack.read(i, i + n)
                except StackError as e:
                    for k in range(self.per_file or 1):
                        self.bad[t - i + k] = f"its file cannot be read ({e})"
                    n = 1
            t += n
        return out

    def holes(self, lo: int, hi: int) -> dict[int, tuple[Any, str]]:
        return {t - lo: (None, self.bad[t]) for t in range(lo, hi) if t in self.bad}

    def finish(self) -> None:
        """The end of the movie: files that cannot be read *at its end* are a write cut short, as a TIFF cut by a
        crash ends with its last complete frame: left out (a warning each), not repaired."""
        for bad_path, why in self.pending:  # no file could be read at all
            self.warnings.append(f"{bad_path}: unreadable ({why}); left out")
        self.pending.clear()
        while self.n and (self.n - 1) in self.bad:
            path, _ = self.frames[self.n - 1]
            first = self.n - 1
            while first and self.frames.get(first - 1, (None,))[0] == path:
                first -= 1
            self.warnings.append(f"{path}: unreadable at the end of the acquisition "
                                 f"({self.bad[self.n - 1]}); left out")
            for t in range(first, self.n):
                self.frames.pop(t, None)
                self.bad.pop(t, None)
            self.n = first

    def release(self, before: int) -> None:
        for t in [t for t in self.frames if t < before]:
            del self.frames[t]
            self.bad.pop(t, None)


def _holes(index: FolderFrames) -> Any:
    """``Source.holes`` of a folder: the frames read whose file could not be read."""

    def holes(layout: Any, t: int | slice, ys: slice, xs: slice) -> dict[int, tuple[Any, str]]:
        frames = [t] if isinstance(t, int) else list(range(t.start, t.stop, t.step or 1))
        return {i: (None, index.bad[f]) for i, f in enumerate(frames) if f in index.bad}

    return holes


def open_folder(path: Path, open_file: Callable[[Path], Any]) -> Source:
    """A folder of frame files as a movie (``open_stack``, which passes itself as ``open_file``); a StackError if it
    holds none that can be read."""
    names = sorted((e.name for e in os.scandir(path) if frame_file(e.name) and e.is_file()), key=natural_key)
    if not names:
        from decode_mem.io._zarr import open_zarr

        return open_zarr(path, key=None, series=0)  # not a zarr store either: its error says what it is not
    index = FolderFrames(path, open_file)
    for name in names:
        index.take(path / name, (path / name).stat().st_size)
    index.finish()
    if index.frame_shape is None:
        raise StackError(f"{path}: none of its {len(names)} frame files can be read (the first: "
                         f"{index.pending[0][1]})")
    array = FramesArray(index.read, (index.n, *index.frame_shape), index.dtype)
    return Source(array, "TYX", "folder", holes=_holes(index),
                  damaged=lambda layout, n: sum(1 for t in index.bad if t < n))
