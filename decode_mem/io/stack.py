"""open_stack: a lazy, read-only ``(T, H, W)`` view of a movie: TIFF, zarr, ``.npy``, a folder of frame files, or a
microscope's own file (Nikon ND2, Zeiss CZI, Leica LIF, Andor SIF, Micro-Manager NDTiff; ``io.formats``).

Nothing is read until frames are asked for; memory is bounded by what the caller asks for, never by
the file. Backends: numpy memmap (``mode='r'``) for contiguous TIFF, tifffile's zarr store for compressed,
tiled, OME and other non-contiguous TIFF, the page reader ``--follow`` uses (``growing_tiff``) for TIFF files
grown page by page (one series per write) and for files cut by a crash, zarr for zarr v2/v3/OME-Zarr,
``np.load(mmap_mode='r')`` for ``.npy``, ``growing_folder`` for folders of frame files (offline and ``--follow``
read the same frames), the format's own library for the microscope formats, plane by plane (``io._planes``).
Damaged frames are repaired as they are read and recorded (``io.damage``, ``Stack.damage``), within a budget: a
stack whose damage covers more than ``max_damage`` of its frames (5 %) is refused. A ``Stack`` pickles
as its path and options and re-opens on first use in the new process. ``stack.metadata``: what the file states
about its camera (``io.metadata``).

    with open_stack("movie.tif", channel=0) as stack:
        for t0, frames in prefetch(stack.blocks(64, context=1)):   # frames: (n + 2, H, W)
            ...
"""

from __future__ import annotations

import dataclasses
import operator
import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from decode_mem.errors import EmptyStackError, StackError, exception_line
from decode_mem.io._layout import Layout, Source, resolve_layout
from decode_mem.io.blocks import edge_blocks
from decode_mem.io.damage import Damage, DamageLog, check_budget, check_share, finite_median, repair_frames
from decode_mem.io.metadata import MovieMetadata, read_metadata

__all__ = ["Stack", "open_stack"]

_TIFF_MAGIC = (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+")  # classic TIFF and BigTIFF, both byte orders
_KNOWN_DAMAGE = {"zarr": "chunks missing from the zarr store", "folder": "frame files that cannot be read",
                 "ndtiff": "images the NDTiff index lists but the files do not hold"}
_NPY_MAGIC = b"\x93NUMPY"
LEVEL_FRAMES = 64  # frames searched for the level of a frame with no good pixel


def open_stack(
    path: str | os.PathLike,
    *,
    series: int | None = None,
    channel: int | None = None,
    z: int | None = None,
    key: str | None = None,
    axes: str | None = None,
    max_damage: float | None = None,
) -> Stack:
    """Open an image stack read-only as a lazy ``(T, H, W)`` :class:`Stack`.

    ``series`` picks a TIFF series (or a bioformats2raw OME-Zarr series; default: a TIFF's series 0 and the
    series after it of the same frame size, one movie, as a file grown page by page holds them), ``key`` an array
    inside a zarr group (default: level 0 of the OME multiscales), ``channel``/``z`` pin the C (or RGB sample)
    and Z axes of hyperstacks, ``axes`` names the dimensions of arrays whose format does not (``'TCYX'``).
    A folder that is not a zarr store is a movie of its frame files in natural name order.
    Headers are parsed now, so a missing, corrupt or ambiguous input fails here with a StackError.
    Damaged frames are repaired as they are read and recorded in ``stack.damage`` (see ``io.damage``);
    ``stack.notes()`` gives the lines a run should show (series left out, damage). ``max_damage``: the share of the
    frames repairs may cover (default ``io.damage.MAX_DAMAGED_SHARE``, 0.05); a stack with more damaged frames is
    refused with a StackError: when it opens where that is known then (missing zarr chunks, unreadable frame files),
    else when the read that finds it ends (NaN frames).
    """
    stack = Stack(path, series=series, channel=channel, z=z, key=key, axes=axes, max_damage=max_damage)
    stack._opened()
    return stack


class Stack(AbstractContextManager):
    """A read-only ``(T, H, W)`` image stack on disk; indexing returns fresh numpy arrays.

    ``stack[5]`` -> (H, W); ``stack[2:7]`` -> (5, H, W); ``stack[t, y0:y1, x0:x1]`` reads a region only.
    """

    ndim = 3

    def __init__(self, path: str | os.PathLike, *, series: int | None = None, channel: int | None = None,
                 z: int | None = None, key: str | None = None, axes: str | None = None,
                 max_damage: float | None = None) -> None:
        """Record what to open; nothing is opened until first use (``open_stack`` opens at once)."""
        self.path = Path(path)
        self._options = {"series": series, "channel": channel, "z": z, "key": key, "axes": axes}
        self._max_damage = check_share(max_damage)
        self._trim = True  # a zarr array ends with its last chunk in the store (GrowingZarr looks for itself)
        self._reset()

    def _reset(self) -> None:
        self._src: Source | None = None
        self._layout: Layout | None = None
        self._dtype: np.dtype | None = None
        self._lock: AbstractContextManager = nullcontext()
        self._pid: int | None = None
        self._closed = False
        self._notes: list[str] = []
        self._damage = DamageLog()
        self._level: float | None = None

    # -- opening -------------------------------------------------------------------------------------

    def _opened(self) -> tuple[Source, Layout]:
        if self._closed:
            raise StackError(f"{self.path}: the stack is closed")
        if self._src is None or self._pid != os.getpid():  # first use, after unpickling, or in a forked child
            self._open()
        return self._src, self._layout

    def _open(self) -> None:
        o = self._options
        src = _open_source(self.path, series=o["series"], key=o["key"], channel=o["channel"], z=o["z"])
        try:
            dtype = np.dtype(src.array.dtype)
            if dtype.kind not in "uif":
                raise StackError(f"{self.path}: unsupported pixel type {dtype}; decode_mem reads integer or "
                                 "floating-point images")
            layout = resolve_layout(src.array.shape, o["axes"] or src.axes, channel=o["channel"], z=o["z"],
                                    where=str(self.path), names=src.names)
            stored = getattr(src.holes, "frames_stored", None)
            if stored is not None and self._trim:  # a zarr array larger than what was written into it
                n = stored(layout, layout.shape[0])  # from a listing of the store, not a loop over the frames
                if n == 0:
                    raise EmptyStackError(f"{self.path}: no chunk of the array's frames is in the store yet")
                if n < layout.shape[0]:
                    src.damage.append(Damage(n, f"the array has {layout.shape[0]} frames but no chunk after frame "
                                                f"{n - 1} is in the store (its writer stopped?)",
                                             f"frames {n}..{layout.shape[0] - 1} left out; the stack ends with "
                                             f"frame {n - 1}"))
                    layout = dataclasses.replace(layout, shape=(n, *layout.shape[1:]))
            if src.damaged is not None and self._trim:  # what is known damaged now: refused before any read
                check_budget(str(self.path), src.damaged(layout, layout.shape[0]), layout.shape[0], self._max_damage,
                             f"{_KNOWN_DAMAGE.get(src.backend, 'missing data')} would be repaired as flat frames")
        except BaseException:
            src.close()
            raise
        self._src, self._layout, self._dtype = src, layout, dtype.newbyteorder("=")
        self._lock = nullcontext() if src.thread_safe else threading.Lock()
        self._pid = os.getpid()
        self._notes = list(src.notes)
        self._damage.extend(src.damage)

    def close(self) -> None:
        """Release the file; further reads raise StackError."""
        if self._src is not None and self._pid == os.getpid():
            self._src.close()
        self._src = None
        self._closed = True

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # pickling: path + options only; the unpickled copy opens the file on first use
    def __getstate__(self) -> dict[str, Any]:
        return {"path": os.path.abspath(self.path), "options": dict(self._options), "max_damage": self._max_damage}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = Path(state["path"])
        self._options = dict(state["options"])
        self._max_damage = state.get("max_damage", check_share(None))
        self._trim = True
        self._reset()

    # -- array protocol --------------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, int, int]:
        return self._opened()[1].shape

    @property
    def dtype(self) -> np.dtype:
        self._opened()
        return self._dtype

    @property
    def backend(self) -> str:
        """'memmap', 'tiff-zarr', 'tiff-pages', 'zarr', 'npy', 'folder', or a microscope format: 'nd2', 'czi',
        'lif', 'sif', 'ndtiff'."""
        return self._opened()[0].backend

    @property
    def metadata(self) -> MovieMetadata:
        """What the file states about its camera and acquisition (``io.metadata``; empty where it states nothing)."""
        src, _ = self._opened()
        if src.metadata is None:
            src.metadata = read_metadata(self.path)
        return src.metadata

    def __len__(self) -> int:
        return self.shape[0]

    # -- what was found wrong --------------------------------------------------------------------------

    @property
    def damage(self) -> DamageLog:
        """Damaged frames found so far (when opening: a cut file; when reading: NaN/inf pixels, missing zarr
        chunks, unreadable frame files) and what was done about each (``io.damage``). Not pickled: a copy on a
        dask worker records what it reads there."""
        return self._damage

    @property
    def reader_notes(self) -> list[str]:
        """What the reader chose, one line each (series of another size left out, a file's pages of another
        size), known once the stack is open; no damage."""
        self._opened()
        return list(self._notes)

    def notes(self) -> list[str]:
        """Lines to show the user: ``reader_notes`` and, if any frame was found damaged (a cut file when opening,
        NaN/inf or missing data when reading), the damage in one line."""
        line = self._damage.line(str(self.path))
        return [*self.reader_notes, *([line] if line else [])]

    def __iter__(self) -> Iterator[np.ndarray]:
        for t in range(len(self)):
            yield self[t]

    def __getitem__(self, key: Any) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        if len(key) > 3:
            raise IndexError(f"too many indices for a (T, H, W) stack: {key!r}")
        key = key + (slice(None),) * (3 - len(key))
        (t, t_post), (ys, y_post), (xs, x_post) = (_normalize(k, n) for k, n in zip(key, self.shape, strict=True))
        if isinstance(ys, int):
            ys, y_post = slice(ys, ys + 1), 0
        if isinstance(xs, int):
            xs, x_post = slice(xs, xs + 1), 0
        post = (y_post, x_post) if isinstance(t, int) else (t_post, y_post, x_post)
        return self._read(t, ys, xs, post=post, frames=t if isinstance(t, int) else range(len(self))[key[0]])

    def read(self, t0: int, t1: int) -> np.ndarray:
        """Frames ``t0 .. t1-1`` as a ``(t1 - t0, H, W)`` array."""
        if not 0 <= t0 <= t1 <= len(self):
            raise IndexError(f"{self.path}: read({t0}, {t1}) outside the stack's 0..{len(self)} frames")
        return self[t0:t1]

    def blocks(self, length: int, context: int = 1) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(t0, frames)`` for consecutive blocks of ``length`` frames (the last may be shorter).

        ``frames`` covers ``t0 - context .. t0 + n - 1 + context``: exact neighbours between blocks, the
        edge frame repeated beyond the ends of the stack (DECODE convention), shape ``(n + 2*context, H, W)``.
        """
        src, layout = self._opened()
        chunks = getattr(src.array, "chunks", None)  # zarr: decoding is per chunk
        chunk = chunks[layout.frame] if chunks and layout.frame is not None else 1
        return edge_blocks(lambda lo, hi: self[lo:hi], len(self), length, context, chunk=chunk)

    # -- reading ---------------------------------------------------------------------------------------

    def _read(self, t: int | slice, ys: slice, xs: slice, post: tuple, frames: int | range) -> np.ndarray:
        src, layout = self._opened()
        try:
            with self._lock:
                data = src.array[layout.index(t, ys, xs)]
        except Exception as e:
            raise StackError(f"{self.path}: cannot read frame(s) {_frames_str(frames)}: "
                             f"{exception_line(e)}") from e
        data = layout.to_tyx(data, t)
        # a memmap view must be copied (and its byte order made native); zarr already returned fresh memory
        out = np.array(data, dtype=self._dtype, order="C") if src.mapped else np.ascontiguousarray(data, self._dtype)
        holes = src.holes(layout, t, ys, xs) if src.holes is not None else None
        if out.dtype.kind == "f" or holes:
            numbers = [t] if isinstance(t, int) else range(t.start, t.stop, t.step or 1)
            repair_frames(out[None] if isinstance(t, int) else out, numbers, self._damage, self._stack_level, holes)
            if self._trim:  # NaN frames found as they are read: the budget holds for them too
                check_budget(str(self.path), self._damage.repaired_frames(), len(self), self._max_damage,
                             "NaN or infinite pixels, or data missing from the file, repaired so far")
        return np.ascontiguousarray(out[post])  # a copy only where a step was negative or an index an int

    def _stack_level(self) -> float:
        """The value of a frame with no good pixel: the median of the first frame's good pixels (the first with
        any among the first ``LEVEL_FRAMES``; else 0), the same whichever frames are read first."""
        if self._level is None:
            src, layout = self._opened()
            level = 0.0
            for t in range(min(LEVEL_FRAMES, len(self))):
                with self._lock:
                    frame = np.asarray(layout.to_tyx(src.array[layout.index(t, slice(None), slice(None))], t),
                                       dtype=np.float64)
                holes = src.holes(layout, t, slice(None), slice(None)) if src.holes is not None else None
                mask = None
                if holes and 0 in holes:
                    mask = holes[0][0] if holes[0][0] is not None else np.ones(frame.shape, bool)
                found = finite_median(frame, mask)
                if found is not None:
                    level = found
                    break
            self._level = level
        return self._level

    # -- description -----------------------------------------------------------------------------------

    def describe(self) -> str:
        """One line: file, backend, source axes and selection, resulting (T, H, W) shape and dtype."""
        src, layout = self._opened()
        o = self._options
        picks = ", ".join(f"{k}={o[k]!r}" for k in ("series", "key", "channel", "z", "axes") if o[k] not in (None, 0))
        axes = o["axes"] or src.axes or "unnamed"
        return (f"{self.path}: {src.backend}, source axes {axes} {tuple(src.array.shape)}"
                f"{', ' + picks if picks else ''} -> (T, H, W) = {layout.shape} {self._dtype}")

    def __repr__(self) -> str:
        if self._src is None:
            return f"Stack({str(self.path)!r}, {'closed' if self._closed else 'not open'})"
        return f"Stack({str(self.path)!r}, backend={self._src.backend!r}, shape={self.shape}, dtype={self._dtype})"


def _normalize(k: Any, n: int) -> tuple[int | slice, Any]:
    """An index along one axis -> (what to read: int or positive-step slice, what to apply after or None)."""
    if isinstance(k, slice):
        r = range(n)[k]
        if r.step > 0 or not r:
            return (slice(r.start, r.stop, r.step) if r else slice(0, 0)), slice(None)
        return slice(r[-1], r[0] + 1, -r.step), slice(None, None, -1)  # zarr has no negative steps
    try:
        i = operator.index(k)
    except TypeError:
        raise TypeError(f"stack indices must be integers or slices, not {type(k).__name__}") from None
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for an axis of size {n}")
    return i % n, None


def _frames_str(frames: int | range) -> str:
    if not isinstance(frames, int) and len(frames) == 0:
        return "(none)"
    if isinstance(frames, int) or len(frames) == 1:
        return str(frames if isinstance(frames, int) else frames[0])
    return f"{frames[0]}..{frames[-1]}" + (f" (step {frames.step})" if frames.step != 1 else "")


def _open_source(path: Path, *, series: int | None, key: str | None, channel: int | None = None,
                 z: int | None = None) -> Source:
    """Dispatch on content, not on the file name: a zarr store, a folder of frame files, files sniffed by magic
    bytes."""
    if not path.exists():
        raise StackError(f"{path}: no such file or directory")
    from decode_mem.io.formats import HEAD_BYTES, is_ndtiff, sniff

    if is_ndtiff(path):
        from decode_mem.io.formats import FORMATS

        return FORMATS["ndtiff"].require(path).open_source(path, series, channel, z)
    if path.is_dir():
        from decode_mem.io._zarr import is_zarr, open_zarr

        if is_zarr(path):
            return open_zarr(path, key=key, series=series or 0)
        if series:  # each frame file holds its own series; a folder has none to pick
            raise StackError(f"{path}: series={series} given, but a folder of frame files holds no series")
        from decode_mem.io._folder import open_folder

        return open_folder(path, open_stack)
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError as e:
        raise StackError(f"{path}: cannot read the file ({exception_line(e, with_type=False)})") from e
    vendor = sniff(head)
    if vendor is not None:
        if key is not None:
            raise StackError(f"{path}: key={key!r} selects an array in a zarr group; a {vendor.name} file takes "
                             "series=, channel= and z=")
        return vendor.require(path).open_source(path, series, channel, z)
    if head[:4] in _TIFF_MAGIC:
        if key is not None:
            raise StackError(f"{path}: key={key!r} selects an array in a zarr group; TIFF files take series=")
        from decode_mem.io._tiff import open_tiff

        return open_tiff(path, series, channel, z)
    if head.startswith(_NPY_MAGIC):
        if series:
            raise StackError(f"{path}: series={series} given, but a .npy file holds one array")
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except Exception as e:
            raise StackError(f"{path}: unreadable .npy file ({exception_line(e)})") from e
        return Source(array, None, "npy", mapped=True)
    if not head:
        raise StackError(f"{path}: empty file (0 bytes)")
    raise StackError(f"{path}: not an image decode_mem reads (TIFF, zarr, .npy, ND2, CZI, LIF, SIF or an NDTiff "
                     f"folder; the file starts with {head[:8]!r})")
