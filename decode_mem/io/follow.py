"""Follow a stack that is still being written: blocks of frames as they land, until the acquisition ends.

``open_growing(path)`` picks the reader: a TIFF file growing page by page (``growing_tiff``: classic, BigTIFF,
OME-TIFF, Micro-Manager's roll-over files), a zarr array growing along time (``growing_zarr``), a folder receiving
single-frame files (``growing_folder``), or a Micro-Manager 2 NDTiff dataset (``_ndtiff.GrowingNDTiff``). Each keeps
a safety margin so that a page, chunk or file still being written is waited for, never read. ``FollowedStack`` wraps
one as a frame source for the engine (``shape`` and ``blocks``): ``blocks`` waits until a block and its next context
frame are complete and yields exactly the blocks ``edge_blocks`` yields for the finished stack (same frames, same
edge repeats), so a followed run gives the offline run's emitters. The acquisition is over when no byte was written
for ``idle_timeout`` seconds; then the last page counts as complete if all its bytes are there. Memory: one block,
plus the offsets of frames not yet read. Frames are repaired as ``open_stack`` repairs them (``io.damage``).
``wait_for_path`` waits for a file the camera has not created yet; while a followed stack waits for frames,
``on_wait`` hears how long until the idle timeout ends the run, and ``waited_s`` sums the waits (rates leave them
out)."""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from decode_mem.errors import StackError
from decode_mem.io.blocks import pad_edges
from decode_mem.io.damage import DamageLog, finite_median, repair_frames
from decode_mem.io.first_frames import FirstFramesMean

UNKNOWN_LENGTH = 2**31 - 1  # ``shape[0]`` of a followed stack: its length is not known until it ends
POLL_S = 0.05
ARRIVALS = 4096  # (frames seen, time) pairs kept for the lag; older ones are thinned out


class Growing(Protocol):
    """What a growing-stack reader offers (``GrowingTiff``, ``GrowingZarr``, ``FrameFolder``)."""

    path: Path
    frame_shape: tuple[int, int] | None
    dtype: np.dtype | None
    warnings: list[str]

    def poll(self, final: bool = False) -> int: ...
    def activity(self) -> Any: ...
    def read(self, lo: int, hi: int) -> np.ndarray: ...
    def release(self, before: int) -> None: ...
    def close(self) -> None: ...


def wait_for_path(path: str | os.PathLike, idle_timeout: float, *, on_wait: Callable[[float], None] | None = None,
                  poll_s: float = POLL_S, clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> float:
    """Wait until ``path`` exists (a camera not started yet), at most ``idle_timeout`` seconds; returns the seconds
    waited. ``on_wait(seconds left)`` about once a second while waiting. A StackError when it never appears."""
    path = Path(path)
    t0 = clock()
    said = None
    while not path.exists():
        left = idle_timeout - (clock() - t0)
        if left <= 0:
            raise StackError(f"{path}: no such file or directory (waited --idle_timeout {idle_timeout:g} s for it)")
        if on_wait is not None and (said is None or said - left >= 1.0):
            on_wait(left)
            said = left
        sleep(min(poll_s * 4, max(left, 0.0)))
    return clock() - t0


def open_growing(path: str | os.PathLike, **options: Any) -> Growing:
    """The reader for ``path``: a TIFF file, a zarr store (``options``: ``key``, ``channel``, ...), an NDTiff dataset
    or a folder."""
    path = Path(path)
    if not path.exists():
        raise StackError(f"{path}: no such file or directory")
    from decode_mem.io.formats import FORMATS, is_ndtiff

    if is_ndtiff(path):
        return FORMATS["ndtiff"].require(path).GrowingNDTiff(path)
    if path.is_dir():
        if path.suffix.lower() == ".zarr" or any((path / m).exists() for m in (".zarray", ".zgroup", "zarr.json")):
            from decode_mem.io.growing_zarr import GrowingZarr

            return GrowingZarr(path, **options)
        from decode_mem.io.growing_folder import FrameFolder

        return FrameFolder(path)
    from decode_mem.io.formats import vendor_format

    other = vendor_format(path)
    if other is not None:
        raise StackError(f"{path}: a {other.name} file is read when it is complete; --follow reads TIFF files, zarr "
                         "arrays, NDTiff datasets and folders of frame files")
    if path.suffix.lower() == ".npy":
        raise StackError(f"{path}: a .npy file is written whole; --follow reads TIFF files, zarr arrays and folders")
    from decode_mem.io.growing_tiff import GrowingTiff

    return GrowingTiff(path)


class FollowedStack:
    """A growing stack as an engine frame source; ``start``: the first frame to localize (``--resume``).

    ``wait_for(n)`` blocks until ``n`` frames are complete or the acquisition has ended (``ended``); ``blocks``
    is the engine's entry. ``available``/``seen_at``/``camera_rate`` describe the writer for the lag report.
    ``widefield()``: the mean of the first ``widefield_frames`` frames read. ``clock``/``sleep``: injectable.
    """

    def __init__(self, growing: Growing, *, idle_timeout: float, start: int = 0, poll_s: float = POLL_S,
                 widefield_frames: int = 0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 on_wait: Callable[[float | None], None] | None = None) -> None:
        self.growing, self.idle_timeout, self.start = growing, float(idle_timeout), int(start)
        self.widefield_frames = int(widefield_frames)
        self._first = FirstFramesMean(self.widefield_frames)  # the widefield image: the first frames read
        self.poll_s, self.clock, self.sleep = poll_s, clock, sleep
        self.available = 0
        self.ended = False
        self._abandoned = threading.Event()  # set by ``stop_waiting``: the reader has gone
        self.ended_by = ""  # 'idle' once the writer was quiet for idle_timeout
        self.arrivals: deque[tuple[int, float]] = deque()  # (frames complete, when first seen), increasing
        self._lock = threading.Lock()  # the arrivals, read by another thread
        self._io = threading.RLock()  # the reader: polled by the engine's prefetch thread and, for the lag, the caller
        self._activity: Any = None
        self._last_change = clock()
        self.on_wait = on_wait  # (seconds until the idle timeout ends the run) while waiting; None when frames came
        self.waited_s = 0.0  # seconds spent waiting for frames (not part of the frames' own time)
        self._waiting = False
        self._said: float | None = None
        self.damage = DamageLog()  # frames repaired as they were read (io.damage); plus the reader's own
        self._level: float | None = None

    # -- the writer -------------------------------------------------------------------------------------

    def poll(self) -> int:
        """Look once: frames complete now (records when new frames were first seen). Thread-safe: the engine's
        reading thread polls while it waits for frames, the caller polls for the lag while the engine computes."""
        with self._io:
            if self.ended:
                return self.available
            n = self.growing.poll()
            now = self.clock()
            activity = self.growing.activity()
            if activity != self._activity or n != self.available:
                self._activity, self._last_change = activity, now
            self._seen(n, now)
            if now - self._last_change >= self.idle_timeout:
                # the last frames count as seen when the writer stopped, not at the timeout: rates leave it out
                self._seen(self.growing.poll(final=True), self._last_change)
                self.ended, self.ended_by = True, "idle"
            return self.available

    def stop_waiting(self) -> None:
        """End every wait for frames now and stop ``blocks`` (from any thread): the run reading them stopped."""
        self._abandoned.set()

    def wait_for(self, n: int) -> int:
        """Frames complete once at least ``n`` are, or the acquisition ended (then: all there are); while it
        waits, ``on_wait(seconds until the idle timeout)`` about once a second."""
        began = None
        while self.poll() < n and not self.ended and not self._abandoned.is_set():
            now = self.clock()
            began = now if began is None else began
            left = max(0.0, self.idle_timeout - (now - self._last_change))
            if self.on_wait is not None and (self._said is None or abs(self._said - left) >= 1.0):
                self._waiting, self._said = True, left
                self.on_wait(left)
            self.sleep(self.poll_s)
        if began is not None:
            self.waited_s += self.clock() - began
        if self._waiting and self.on_wait is not None:
            self.on_wait(None)
        self._waiting, self._said = False, None
        return self.available

    def _seen(self, n: int, now: float) -> None:
        with self._lock:
            if n > self.available:
                self.arrivals.append((n, now))
                self.available = n
                if len(self.arrivals) > ARRIVALS:  # keep the newest half, every other of the older half
                    items = list(self.arrivals)
                    half = len(items) // 2
                    self.arrivals = deque(items[:half:2] + items[half:])

    def seen_at(self, frame: int) -> float | None:
        """When frame ``frame`` (0-based) was first seen complete (None: not yet, or forgotten)."""
        with self._lock:
            for n, t in self.arrivals:
                if n > frame:
                    return t
        return None

    def camera_rate(self, window_s: float = 10.0) -> float | None:
        """Frames per second the writer delivered over the last ``window_s`` seconds of arrivals."""
        with self._lock:
            if len(self.arrivals) < 2:
                return None
            n1, t1 = self.arrivals[-1]
            old = [(n, t) for n, t in self.arrivals if t <= t1 - window_s] or [self.arrivals[0]]
            n0, t0 = old[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else None

    def forget_before(self, frame: int) -> None:
        """Drop what is kept of frames before ``frame`` (read already)."""
        with self._io:
            self.growing.release(frame)
        with self._lock:
            while len(self.arrivals) > 1 and self.arrivals[1][0] <= frame:
                self.arrivals.popleft()

    # -- the engine's frame source ----------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, int, int]:
        if self.growing.frame_shape is None:
            raise StackError(f"{self.growing.path}: no complete frame yet")
        return (UNKNOWN_LENGTH, *self.growing.frame_shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.growing.dtype)

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Frames ``lo .. hi-1``, repaired as ``open_stack`` repairs them (``io.damage``)."""
        with self._io:
            frames = self.growing.read(lo, hi)
            holes = self.growing.holes(lo, hi) if hasattr(self.growing, "holes") else None
        return repair_frames(frames, range(lo, hi), self.damage, lambda: self._stack_level(frames), holes)

    def _stack_level(self, frames: np.ndarray) -> float:
        """A frame with no good pixel becomes a flat frame at this level: the median of the first frame's good
        pixels (the first frame read with any; runs read frame 0 first), as ``Stack`` has it."""
        if self._level is None:
            found = (finite_median(f) for f in frames)
            self._level = next((v for v in found if v is not None), 0.0)
        return self._level

    def damage_log(self) -> DamageLog:
        """Every repair: those made here and those of the reader (a zarr's missing chunks)."""
        log = DamageLog(self.damage.records)
        extra = getattr(self.growing, "damage", None)
        if extra is not None:
            log.extend(extra.records)
        return log

    def blocks(self, length: int, context: int = 1) -> Iterator[tuple[int, np.ndarray]]:
        """``(t0, frames)`` as ``edge_blocks`` gives them for the finished stack, from ``start`` on, each as soon as
        its frames and the next context frames are complete; ``t0`` is the stack's frame number."""
        t0 = self.start
        while True:
            n = self.wait_for(t0 + length + context)
            if n <= t0 or self._abandoned.is_set():
                return
            t1 = min(t0 + length, n)
            lo, hi = max(t0 - context, 0), min(t1 + context, n)
            frames = self.read(lo, hi)
            self._first.add(frames[t0 - lo: t1 - lo])
            self.forget_before(max(t1 - context, 0))
            yield t0, pad_edges(frames, t0, t1, lo, hi, context)
            t0 = t1

    def widefield(self) -> tuple[np.ndarray | None, int]:
        """(mean of the first frames read, how many), or (None, 0) before any."""
        mean, n = self._first.mean()
        return (None, 0) if mean is None else (mean.astype(np.float32), n)

    def close(self) -> None:
        with self._io:
            self.growing.close()
