"""A folder into which an acquisition writes one file per frame (or a few frames per file), read as they arrive.

Files (``*.tif``, ``*.tiff``, ``*.npy``) are taken in natural name order (``frame_2`` before ``frame_10``). A file
may still be being written when it appears, so the safety margin is one file: a file is complete once a file
that sorts after it exists (a sequential writer), or when the acquisition is over (``poll(final=True)``; a last
file that cannot be read then is reported and left out). A file that arrives sorting before one already taken
is reported and skipped. Only the files of frames not yet read are remembered: flat memory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from decode_mem.errors import StackError
from decode_mem.io.stack import open_stack

SUFFIXES = (".tif", ".tiff", ".npy")


def natural_key(name: str) -> tuple:
    """``frame_2`` before ``frame_10``: digit runs compare as numbers."""
    return tuple(int(p) if p.isdigit() else p.lower() for p in re.split(r"(\d+)", name))


class FrameFolder:
    """``poll()`` -> frames complete so far; ``read(lo, hi)`` reads complete frames only."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.frames: dict[int, tuple[Path, int]] = {}  # frame -> (file, index in the file), not yet released
        self.last: tuple | None = None  # natural key of the last file taken
        self.last_name = ""
        self.n = 0
        self.frame_shape: tuple[int, int] | None = None
        self.dtype: np.dtype | None = None
        self.warnings: list[str] = []
        self._activity: tuple = ()
        self.files = 0  # files taken (or left out at the end)
        self.late = 0  # files that arrived out of order

    def activity(self) -> tuple:
        return self._activity

    def poll(self, final: bool = False) -> int:
        names = [e.name for e in os.scandir(self.path)
                 if e.name.lower().endswith(SUFFIXES) and not e.name.startswith(".")]
        # only the files after the last one taken are sorted, not the whole folder at every poll
        keyed = ((natural_key(n), n) for n in names)
        new = [n for _, n in sorted(kn for kn in keyed if self.last is None or kn[0] > self.last)]
        top = new[-1] if new else self.last_name  # the name that sorts last
        late = len(names) - len(new) - self.files
        if late > self.late:
            self.warnings.append(f"{self.path}: {late - self.late} file(s) arrived after {self.last_name}, which "
                                 "sorts after them (frames must arrive in name order); skipped")
            self.late = late
        growing = 0
        for i, name in enumerate(new):
            if i == len(new) - 1 and not final:
                growing = (self.path / name).stat().st_size  # the newest file: maybe still being written
                break
            if not self._take(self.path / name, last=i == len(new) - 1):
                break
        self._activity = (len(names), top, growing)
        return self.n

    def _take(self, path: Path, last: bool) -> bool:
        self.files += 1
        self.last, self.last_name = natural_key(path.name), path.name
        try:
            with open_stack(path) as stack:
                shape, dtype = tuple(stack.shape), stack.dtype
        except StackError as e:
            if last:
                self.warnings.append(f"{path}: unreadable at the end of the acquisition ({e}); left out")
                return False
            raise
        if self.frame_shape is None:
            self.frame_shape, self.dtype = shape[1:], dtype
        elif (shape[1:], dtype) != (self.frame_shape, self.dtype):
            raise StackError(f"{path}: frames of {shape[1]}x{shape[2]} {dtype.name}, the first file's were "
                             f"{self.frame_shape[0]}x{self.frame_shape[1]} {self.dtype.name}")
        for i in range(shape[0]):
            self.frames[self.n + i] = (path, i)
        self.n += shape[0]
        return True

    def read(self, lo: int, hi: int) -> np.ndarray:
        out = np.empty((hi - lo, *self.frame_shape), self.dtype)
        t = lo
        while t < hi:
            path, i = self.frames[t]
            with open_stack(path) as stack:
                n = min(hi - t, stack.shape[0] - i)
                out[t - lo:t - lo + n] = stack.read(i, i + n)
            t += n
        return out

    def release(self, before: int) -> None:
        for t in [t for t in self.frames if t < before]:
            del self.frames[t]

    def close(self) -> None:
        """Nothing is held open."""
