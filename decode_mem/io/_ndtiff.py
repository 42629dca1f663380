"""Micro-Manager 2 / pycro-manager NDTiff datasets: a folder of ``*_NDTiffStack.tif`` files and ``NDTiff.index``.

The index lists every image: its axes (``{"time": 3, "channel": "DAPI", "z": 0, "position": 0}``), the file it is
in, where its pixels start and their size and type; the ndtiff library parses its entries
(``NDTiffIndexEntry.unpack_single_index_entry``) and reads the summary metadata (``SingleNDTiffReader``). The index
is parsed into lists, turned into small arrays once the stack is open (a few bytes per image; the parsed entries are
let go), and pixels are read at their offsets with ``os.pread``: uncompressed, little-endian, as NDTiff writes them.
Positions (and grid tiles) are series; ``channel=`` and ``z=`` pick the rest. An image the index lists but the file
does not hold whole (a crash) is a hole, repaired as a missing zarr chunk is (``io.damage``); images missing at the
end end the stack there.

``GrowingNDTiff`` reads a dataset Micro-Manager is still writing (``--follow``): new index entries are parsed as
they are appended; an entry is written after its pixels, so a frame is complete once its entry is whole.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import EmptyStackError, StackError, exception_line
from decode_mem.io._layout import Source, entries_text
from decode_mem.io._planes import PlaneArray
from decode_mem.io.damage import Damage
from decode_mem.io.formats import NDTIFF_INDEX
from decode_mem.io.metadata import MovieMetadata, micromanager_fields

LETTERS = {"time": "T", "z": "Z", "channel": "C"}
SERIES_AXES = ("position", "row", "column")  # what picks a series: a stage position, a tile of a grid
PIXEL_TYPES = {0: np.uint8, 1: np.uint16, 3: np.uint16, 4: np.uint16, 5: np.uint16, 6: np.uint16}  # 2: RGB
MISSING = -1


class NDTiffIndex:
    """The entries of ``NDTiff.index``, parsed as far as they are whole (more with each ``update``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / NDTIFF_INDEX
        self.position = 0  # bytes of the index parsed
        self.axes: list[dict[str, Any]] = []
        self.files: list[str] = []
        self.file_of: list[int] = []
        self.offset: list[int] = []
        self.shape: list[tuple[int, int]] = []
        self.pixel_type: list[int] = []
        self.compression: list[int] = []
        self.metadata_at: list[tuple[int, int]] = []

    def update(self) -> int:
        """Parse the entries appended since the last call; the number of entries known."""
        from ndtiff.ndtiff_index import NDTiffIndexEntry

        with open(self.path, "rb") as fh:
            fh.seek(self.position)
            data = fh.read()
        pos = 0
        while pos < len(data):
            try:
                found = NDTiffIndexEntry.unpack_single_index_entry(data, pos)
            except Exception:  # an entry still being written, or a damaged tail: stop before it
                break
            if found is None:
                break
            end, axes, entry = found
            if end is None or end > len(data) or not isinstance(axes, dict):
                break
            self._add(axes, entry)
            pos = end
        self.position += pos
        return len(self.axes)

    def forget(self) -> None:
        """Let go of the parsed entries (an open stack keeps only the arrays it reads with)."""
        for entries in (self.axes, self.file_of, self.offset, self.shape, self.pixel_type, self.compression,
                        self.metadata_at):
            entries.clear()

    def _add(self, axes: dict[str, Any], entry: Any) -> None:
        name = str(entry.filename)
        if name not in self.files:
            self.files.append(name)
        self.axes.append(axes)
        self.file_of.append(self.files.index(name))
        self.offset.append(int(entry.pix_offset))
        self.shape.append((int(entry.image_height), int(entry.image_width)))
        self.pixel_type.append(int(entry.pixel_type))
        self.compression.append(int(getattr(entry, "pixel_compression", 0)))
        self.metadata_at.append((int(entry.metadata_offset), int(entry.metadata_length)))


class PixelFiles:
    """Open files of a dataset, read with ``os.pread`` (no shared file position: reads from several threads)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()

    def fd(self, name: str) -> int:
        if not name or name != os.path.basename(name) or "\0" in name or name in (".", ".."):
            raise OSError(f"{name!r} is not the name of a file in the dataset's folder")  # an index edited
        with self._lock:
            if name not in self._fds:
                self._fds[name] = os.open(self.folder / name, os.O_RDONLY)
            return self._fds[name]

    def size(self, name: str) -> int:
        """The file's size; 0 where it is not there (its images are then missing)."""
        try:
            return os.fstat(self.fd(name)).st_size
        except OSError:
            return 0

    def read(self, name: str, offset: int, n: int) -> bytes:
        return os.pread(self.fd(name), n, offset)

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


def _values(index: NDTiffIndex, axis: str) -> list[Any]:
    """An axis's values: numbers in order, names in the order they first appear."""
    seen = list(dict.fromkeys(a[axis] for a in index.axes if axis in a))
    return sorted(seen) if all(isinstance(v, (int, float)) for v in seen) else seen


class Selection:
    """How index entries map onto the array: loop axes, their values, which series."""

    def __init__(self, index: NDTiffIndex, path: Path, series: int | None) -> None:
        if not index.axes:
            raise EmptyStackError(f"{path}: the NDTiff dataset lists no image yet")
        names = list(dict.fromkeys(k for a in index.axes for k in a))
        self.series_axes = [k for k in names if k in SERIES_AXES]
        series_keys = list(dict.fromkeys(tuple(a.get(k) for k in self.series_axes) for a in index.axes))
        if series is None and len(series_keys) > 1:
            shown = [", ".join(f"{k} {v}" for k, v in zip(self.series_axes, key, strict=True)) for key in series_keys]
            raise StackError(f"{path}: the NDTiff dataset holds {len(series_keys)} positions or tiles; pass series= "
                             f"to pick one ({entries_text(shown)})")
        pick = series or 0
        if not 0 <= pick < len(series_keys):
            raise StackError(f"{path}: series={series} out of range: the dataset holds {len(series_keys)}")
        self.series_key = series_keys[pick]
        self.n_series = len(series_keys)
        order = [k for k in ("time", "z", "channel") if k in names] + [
            k for k in names if k not in LETTERS and k not in SERIES_AXES]
        self.loop_axes = order
        self.values = {k: _values(index, k) for k in order}
        self.position = {k: {v: i for i, v in enumerate(vals)} for k, vals in self.values.items()}  # value -> index
        self.letters = "".join(LETTERS.get(k, "?") for k in order)

    def key(self, axes: dict[str, Any]) -> tuple[int, ...] | None:
        """The loop index of an entry of the chosen series, None for another series' entry."""
        if tuple(axes.get(k) for k in self.series_axes) != self.series_key:
            return None
        try:
            return tuple(self.position[k][axes[k]] if k in axes else 0 for k in self.loop_axes)
        except (KeyError, TypeError):  # a value not seen (or not hashable): no place in the array
            return None


def _dtype(index: NDTiffIndex, path: Path) -> np.dtype:
    kinds = set(index.pixel_type)
    if not kinds <= set(PIXEL_TYPES) or any(index.compression):
        raise StackError(f"{path}: NDTiff pixel type {sorted(kinds)} or compression "
                         f"{sorted(set(index.compression))} is not read by decode_mem (uncompressed 8- to 16-bit "
                         "monochrome images)")
    return np.dtype(np.result_type(*(PIXEL_TYPES[k] for k in kinds))).newbyteorder("<")


def open_source(path: Path, series: int | None, channel: int | None = None, z: int | None = None) -> Source:
    """An NDTiff dataset as an N-D array over its index; frames read at their offsets."""
    index = NDTiffIndex(path)
    try:
        index.update()
    except OSError as e:
        raise StackError(f"{path}: cannot read {NDTIFF_INDEX} ({exception_line(e, with_type=False)})") from e
    sel = Selection(index, path, series)
    shapes = {index.shape[i] for i in range(len(index.axes)) if sel.key(index.axes[i]) is not None}
    if len(shapes) != 1:
        raise StackError(f"{path}: the NDTiff images of series {series or 0} have sizes {sorted(shapes)}; "
                         "decode_mem reads images of one size")
    (height, width), dtype = shapes.pop(), _dtype(index, path)
    files = PixelFiles(path)
    loop_shape = [len(sel.values[k]) for k in sel.loop_axes]
    table = np.full(loop_shape, MISSING, dtype=np.int64)
    plane_bytes = height * width * dtype.itemsize
    sizes = {name: files.size(name) for name in index.files}
    cut = []
    for i, axes in enumerate(index.axes):
        k = sel.key(axes)
        if k is None:
            continue
        if index.offset[i] + plane_bytes > sizes[index.files[index.file_of[i]]]:
            cut.append(k)
            continue
        table[k] = i
    damage = []
    if sel.loop_axes and sel.loop_axes[0] == "time":  # images missing at the end (a crash): the stack ends before
        held = np.flatnonzero((table != MISSING).reshape(len(table), -1).any(axis=1))
        end = int(held[-1]) + 1 if len(held) else 0
        if 0 < end < len(table):
            damage.append(Damage(end, f"the NDTiff index lists {len(table)} time points but the files hold none "
                                      f"after time point {end - 1} whole (cut by a crash?)",
                                 f"time points {end}..{len(table) - 1} left out; the stack ends with frame {end - 1}"))
            table = table[:end]
    source = _source(path, index, sel, table, files, (height, width), dtype)
    source.damage.extend(damage)
    if cut:
        source.notes.append(f"{len(cut)} image(s) the index lists are not whole in their files (cut by a crash?): "
                            "repaired as missing")
    return source


def _source(path: Path, index: NDTiffIndex, sel: Selection, table: np.ndarray, files: PixelFiles,
            frame_shape: tuple[int, int], dtype: np.dtype) -> Source:
    height, width = frame_shape
    metadata = _metadata(path, index)
    # what reading needs, as arrays (a few bytes an image); the parsed entries (a dict each) are let go
    file_names = list(index.files)
    file_of, offset = np.asarray(index.file_of, np.int32), np.asarray(index.offset, np.int64)
    index.forget()

    def read_plane(loop: tuple[int, ...], ys: slice, xs: slice) -> np.ndarray:
        i = int(table[loop])
        if i == MISSING:
            return np.zeros((len(range(height)[ys]), len(range(width)[xs])), dtype)
        raw = files.read(file_names[file_of[i]], int(offset[i]), height * width * dtype.itemsize)
        return np.frombuffer(raw, dtype).reshape(height, width)[ys, xs]

    def holes(layout: Any, t: Any, ys: slice, xs: slice) -> dict:
        idx = layout.index(t, ys, xs)
        picked = table[tuple(idx[:table.ndim])]
        if layout.frame is None or np.ndim(picked) == 0:
            return {0: (None, "the NDTiff index lists no whole image here")} if picked == MISSING else {}
        missing = np.flatnonzero(np.asarray(picked).reshape(-1) == MISSING)
        return {int(k): (None, "the NDTiff index lists no whole image here") for k in missing}

    array = PlaneArray(table.shape, (height, width), dtype, read_plane)
    names = {"C": [str(v) for v in sel.values["channel"]]} if "channel" in sel.values else {}
    notes = [f"series {sel.series_key} of {sel.n_series}"] if sel.n_series > 1 else []
    missing = (table == MISSING).any()
    return Source(array, sel.letters + "YX", "ndtiff", close=files.close, metadata=metadata,
                  names=names, notes=notes, holes=holes if missing else None,
                  damaged=(lambda layout, n: len(holes(layout, slice(0, n), slice(None), slice(None)))) if missing
                  else None)


def read_metadata(path: Path) -> MovieMetadata:
    """The camera a dataset's summary metadata and first image's metadata record (``docs/formats.md``)."""
    index = NDTiffIndex(Path(path))
    index.update()
    return _metadata(Path(path), index)


def _metadata(path: Path, index: NDTiffIndex) -> MovieMetadata:
    props: dict[str, Any] = {}
    try:
        from ndtiff.ndtiff_file import SingleNDTiffReader

        reader = SingleNDTiffReader(str(path / index.files[0]))
        try:
            props.update(reader.summary_md or {})
        finally:
            reader.close()
        offset, length = index.metadata_at[0]
        if 0 < length <= 1 << 20:
            with open(path / index.files[index.file_of[0]], "rb") as fh:
                fh.seek(offset)
                props.update(json.loads(fh.read(length)))
    except Exception:  # metadata never make a movie unreadable
        pass
    values, acquisition, settings = micromanager_fields(props)
    if values.get("pixel_size") == 1000.0:  # Micro-Manager's PixelSizeUm 1: no calibration was set
        values.pop("pixel_size")
    found = values or acquisition or settings
    return MovieMetadata("ndtiff" if found else None, values, acquisition, settings)


class GrowingNDTiff:
    """An NDTiff dataset Micro-Manager is still writing (``io.follow.Growing``): one image per frame, in the
    order the index lists them (one channel, z and position, as for a growing TIFF)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.index = NDTiffIndex(self.path)
        self.files = PixelFiles(self.path)
        self.frame_shape: tuple[int, int] | None = None
        self.dtype: np.dtype | None = None
        self.warnings: list[str] = []
        self._where: dict[int, tuple[str, int]] = {}  # frame -> (file, pixel offset), frames not read yet
        self._first_axes: dict[str, Any] | None = None
        self.n = 0
        self._activity: tuple = ()

    def activity(self) -> tuple:
        return self._activity

    def poll(self, final: bool = False) -> int:
        """Frames complete so far: index entries that are whole, with their pixels in the file."""
        known = len(self.index.axes)
        try:
            total = self.index.update()
        except OSError:  # the index file not created yet
            total = known
        for i in range(known, total):
            self._take(i)
        self._activity = (self.index.position, total)
        return self.n

    def _take(self, i: int) -> None:
        index, axes = self.index, self.index.axes[i]
        if self._first_axes is None:
            self._first_axes = {k: v for k, v in axes.items() if k != "time"}
            self.frame_shape = index.shape[i]
            self.dtype = _dtype(index, self.path)
        other = {k: v for k, v in axes.items() if k != "time"}
        if other != self._first_axes or index.shape[i] != self.frame_shape:
            raise StackError(f"{self.path}: image {i} of the NDTiff index is at {axes}, the first at "
                             f"{self._first_axes}: --follow reads datasets of one channel, z and position (as a "
                             "growing TIFF); localize this one when it is complete")
        if index.pixel_type[i] not in PIXEL_TYPES or index.compression[i]:
            raise StackError(f"{self.path}: image {i}: a pixel type or compression decode_mem does not read")
        name = index.files[index.file_of[i]]
        h, w = self.frame_shape
        if index.offset[i] + h * w * self.dtype.itemsize > self.files.size(name):
            raise StackError(f"{self.path}: image {i} of the index lies beyond the end of {name}")
        self._where[self.n] = (name, index.offset[i])
        self.n += 1

    def read(self, lo: int, hi: int) -> np.ndarray:
        h, w = self.frame_shape
        out = np.empty((hi - lo, h, w), self.dtype)
        for k in range(lo, hi):
            name, offset = self._where[k]
            out[k - lo] = np.frombuffer(self.files.read(name, offset, h * w * self.dtype.itemsize),
                                        self.dtype).reshape(h, w)
        return out

    def release(self, before: int) -> None:
        for k in [k for k in self._where if k < before]:
            del self._where[k]

    def close(self) -> None:
        self.files.close()
