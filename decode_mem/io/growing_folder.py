"""A folder into which an acquisition writes one file per frame (or a few frames per file), read as they arrive.

Which file holds which frame, and what an unreadable file counts as, is ``io._folder`` (shared with ``open_stack``
of a finished folder). A file may still be being written when it appears, so the safety margin is one file: a file
is complete once a file that sorts after it exists (a sequential writer), or when the acquisition is over
(``poll(final=True)``). The folder is not listed at every poll: the names that follow the last one seen by
counting up its last number (``img_0009.tif`` -> ``img_0010.tif``, same padding) are looked up one by one, and
the folder is listed only when that finds nothing and the folder changed since it was last listed (its
modification time). A file that arrives sorting before one already taken is reported and skipped. Only the files
of frames not yet read are remembered: flat memory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.io._folder import FolderFrames, frame_file, natural_key, next_name
from decode_mem.io.stack import open_stack

__all__ = ["FrameFolder", "natural_key", "next_name"]


class FrameFolder:
    """``poll()`` -> frames complete so far; ``read(lo, hi)`` reads complete frames only."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.index = FolderFrames(self.path, open_stack)
        self.queue: list[str] = []  # names seen, in order, not taken yet (the last may still be being written)
        self.newest: tuple | None = None  # natural key of the newest name seen
        self.newest_name = ""
        self.last_name = ""  # the last file taken
        self.listed_mtime: int | None = None  # the folder's mtime when it was last listed
        self.listings = 0  # how often the folder was listed (the cost that must not grow with every poll)
        self.names_listed = 0  # frame files in the last listing
        self.files = 0  # files taken
        self.late = 0  # files that arrived out of order
        self._activity: tuple = ()

    @property
    def n(self) -> int:
        return self.index.n

    @property
    def frame_shape(self) -> tuple[int, int] | None:
        return self.index.frame_shape

    @property
    def dtype(self) -> np.dtype | None:
        return self.index.dtype

    @property
    def warnings(self) -> list[str]:
        return self.index.warnings

    def activity(self) -> tuple:
        return self._activity

    def _see(self, name: str) -> None:
        self.queue.append(name)
        self.newest, self.newest_name = natural_key(name), name

    def _look(self, final: bool) -> None:
        """New names: the expected next ones first; a listing only if none and the folder changed."""
        found = False
        while self.newest_name:
            guess = next_name(self.newest_name)
            if guess is None or not frame_file(guess) or not (self.path / guess).exists():
                break
            self._see(guess)
            found = True
        mtime = os.stat(self.path).st_mtime_ns
        if found and not final:
            return
        if mtime == self.listed_mtime and not final:
            return
        self.listed_mtime, self.listings = mtime, self.listings + 1
        names = [e.name for e in os.scandir(self.path) if frame_file(e.name)]
        self.names_listed = len(names)
        keyed = ((natural_key(n), n) for n in names)
        for _, name in sorted(kn for kn in keyed if self.newest is None or kn[0] > self.newest):
            self._see(name)
        late = len(names) - len(self.queue) - self.files
        if late > self.late:
            self.warnings.append(f"{self.path}: {late - self.late} file(s) arrived after {self.last_name}, which "
                                 "sorts after them (frames must arrive in name order); skipped")
            self.late = late

    def poll(self, final: bool = False) -> int:
        self._look(final)
        growing = 0
        while self.queue:
            if len(self.queue) == 1 and not final:
                growing = (self.path / self.queue[0]).stat().st_size  # the newest file: maybe still being written
                break
            name = self.queue.pop(0)
            self.last_name = name
            self.files += 1
            self.index.take(self.path / name)
        if final:
            self.index.finish()
        self._activity = (self.files, self.newest_name, growing)
        return self.index.n

    def read(self, lo: int, hi: int) -> np.ndarray:
        return self.index.read(lo, hi)

    def holes(self, lo: int, hi: int) -> dict[int, tuple[Any, str]]:
        """Frames of ``lo .. hi-1`` whose file could not be read (index in the read -> (None, why))."""
        return self.index.holes(lo, hi)

    def release(self, before: int) -> None:
        self.index.release(before)

    def close(self) -> None:
        """Nothing is held open."""
