"""open_stack: a lazy, read-only ``(T, H, W)`` view of a TIFF, zarr or ``.npy`` movie.

Nothing is read until frames are asked for; memory is bounded by what the caller asks for, never by
the file. Backends: numpy memmap (``mode='r'``) for contiguous TIFF, tifffile's zarr store for compressed,
tiled, OME and other non-contiguous TIFF, zarr for zarr v2/v3/OME-Zarr, ``np.load(mmap_mode='r')`` for
``.npy``. A ``Stack`` pickles as its path and options and re-opens on first use in the new process.

    with open_stack("movie.tif", channel=0) as stack:
        for t0, frames in prefetch(stack.blocks(64, context=1)):   # frames: (n + 2, H, W)
            ...
"""

from __future__ import annotations

import operator
import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from decode_mem.errors import StackError
from decode_mem.io._layout import Layout, Source, resolve_layout
from decode_mem.io.blocks import edge_blocks

__all__ = ["Stack", "open_stack"]

_TIFF_MAGIC = (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+")  # classic TIFF and BigTIFF, both byte orders
_NPY_MAGIC = b"\x93NUMPY"


def open_stack(
    path: str | os.PathLike,
    *,
    series: int = 0,
    channel: int | None = None,
    z: int | None = None,
    key: str | None = None,
    axes: str | None = None,
) -> Stack:
    """Open an image stack read-only as a lazy ``(T, H, W)`` :class:`Stack`.

    ``series`` picks a TIFF series (or a bioformats2raw OME-Zarr series), ``key`` an array inside a zarr
    group (default: level 0 of the OME multiscales), ``channel``/``z`` pin the C (or RGB sample) and Z
    axes of hyperstacks, ``axes`` names the dimensions of arrays whose format does not (``'TCYX'``).
    Headers are parsed now, so a missing, corrupt or ambiguous input fails here with a StackError.
    """
    stack = Stack(path, series=series, channel=channel, z=z, key=key, axes=axes)
    stack._opened()
    return stack


class Stack(AbstractContextManager):
    """A read-only ``(T, H, W)`` image stack on disk; indexing returns fresh numpy arrays.

    ``stack[5]`` -> (H, W); ``stack[2:7]`` -> (5, H, W); ``stack[t, y0:y1, x0:x1]`` reads a region only.
    """

    ndim = 3

    def __init__(self, path: str | os.PathLike, *, series: int = 0, channel: int | None = None, z: int | None = None,
                 key: str | None = None, axes: str | None = None) -> None:
        """Record what to open; nothing is opened until first use (``open_stack`` opens at once)."""
        self.path = Path(path)
        self._options = {"series": series, "channel": channel, "z": z, "key": key, "axes": axes}
        self._reset()

    def _reset(self) -> None:
        self._src: Source | None = None
        self._layout: Layout | None = None
        self._dtype: np.dtype | None = None
        self._lock: AbstractContextManager = nullcontext()
        self._pid: int | None = None
        self._closed = False

    # -- opening -------------------------------------------------------------------------------------

    def _opened(self) -> tuple[Source, Layout]:
        if self._closed:
            raise StackError(f"{self.path}: the stack is closed")
        if self._src is None or self._pid != os.getpid():  # first use, after unpickling, or in a forked child
            self._open()
        return self._src, self._layout

    def _open(self) -> None:
        o = self._options
        src = _open_source(self.path, series=o["series"], key=o["key"])
        try:
            dtype = np.dtype(src.array.dtype)
            if dtype.kind not in "uif":
                raise StackError(f"{self.path}: unsupported pixel type {dtype}; decode_mem reads integer or "
                                 "floating-point images")
            layout = resolve_layout(src.array.shape, o["axes"] or src.axes, channel=o["channel"], z=o["z"],
                                    where=str(self.path))
        except BaseException:
            src.close()
            raise
        self._src, self._layout, self._dtype = src, layout, dtype.newbyteorder("=")
        self._lock = nullcontext() if src.thread_safe else threading.Lock()
        self._pid = os.getpid()

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
        return {"path": os.path.abspath(self.path), "options": dict(self._options)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = Path(state["path"])
        self._options = dict(state["options"])
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
        """'memmap', 'tiff-zarr', 'zarr' or 'npy'."""
        return self._opened()[0].backend

    def __len__(self) -> int:
        return self.shape[0]

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
                             f"{type(e).__name__}: {e}") from e
        data = layout.to_tyx(data, t)[post]
        # a memmap view must be copied (and its byte order made native); zarr already returned fresh memory
        out = np.array(data, dtype=self._dtype, order="C") if src.mapped else np.ascontiguousarray(data, self._dtype)
        if out.dtype.kind == "f":
            self._check_finite(out, frames)
        return out

    def _check_finite(self, out: np.ndarray, frames: int | range) -> None:
        """Raise naming the first frame with NaN or inf; one float64 sum per frame, no full-size temporary."""
        if out.size == 0:
            return
        per_frame = out.reshape(1 if isinstance(frames, int) else len(frames), -1)
        if np.isfinite(per_frame.sum(axis=1, dtype=np.float64)).all():
            return
        bad = next(i for i, f in enumerate(per_frame) if not np.isfinite(f).all())
        frame = frames if isinstance(frames, int) else frames[bad]
        raise StackError(f"{self.path}: frame {frame} contains NaN or infinite values")

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


def _open_source(path: Path, *, series: int, key: str | None) -> Source:
    """Dispatch on content, not on the file name: a directory is zarr, files are sniffed by magic bytes."""
    if not path.exists():
        raise StackError(f"{path}: no such file or directory")
    if path.is_dir():
        from decode_mem.io._zarr import open_zarr

        return open_zarr(path, key=key, series=series)
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError as e:
        raise StackError(f"{path}: cannot read the file ({e})") from e
    if head[:4] in _TIFF_MAGIC:
        if key is not None:
            raise StackError(f"{path}: key={key!r} selects an array in a zarr group; TIFF files take series=")
        from decode_mem.io._tiff import open_tiff

        return open_tiff(path, series)
    if head.startswith(_NPY_MAGIC):
        if series:
            raise StackError(f"{path}: series={series} given, but a .npy file holds one array")
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except Exception as e:
            raise StackError(f"{path}: unreadable .npy file ({type(e).__name__}: {e})") from e
        return Source(array, None, "npy", mapped=True)
    if not head:
        raise StackError(f"{path}: empty file (0 bytes)")
    raise StackError(f"{path}: not a TIFF, zarr or .npy image (the file starts with {head!r})")
