"""DECODE emitter sets: the ``.h5`` that DECODE's ``EmitterSet.save`` writes (TuragaLab/DECODE,
``decode/utils/emitter_io.py``: ``save_h5``/``load_h5``), as SMAP's "Import DECODE .h5" reads it.

Layout: group ``meta`` with attributes ``xy_unit`` (``'px'`` or ``'nm'``) and ``px_size`` (the pixel in DECODE's x
and y, nm); group ``decode`` with ``version``; group ``data`` with ``xyz`` (N x 3, float32), ``xyz_sig`` and
``xyz_cr`` (N x 3: the predicted error and the Cramér-Rao bound's *variance*), ``phot``, ``phot_sig``, ``phot_cr``,
``bg``, ``bg_sig``, ``bg_cr``, ``prob`` (N), ``frame_ix`` and ``id`` (N, int64). A column without values is an
empty dataset (``h5py.Empty``). Frames are 0-based; z, its σ and CRLB are nm.

DECODE's x is the frame's first axis (rows: its ``meshgrid`` is 'ij'; SMAP's loader puts DECODE's x into ``ynm``),
so DECODE's x is decode_mem's y and DECODE's y decode_mem's x, and ``px_size`` is (row pixel, column pixel). In
pixels the centres are at integers as in decode_mem; DECODE's nm are ``px * px_size`` (no half-pixel shift).

Read: in chunks; σ from ``xyz_sig``, else the square root of ``xyz_cr``. Written: streamed (resizable datasets),
``xyz_cr``/``bg_*``/``phot_cr`` empty, ``prob`` 1 where the table has none, ``id`` -1 (DECODE's default) or the
molecule of a linked file. DECODE's loader passes every dataset of ``data`` and every attribute of ``meta`` to
``EmitterSet``, so decode_mem's own numbers (pixel size in float64, frame size, frames) are attributes of the root
group and further columns a group ``per_localization`` (after ``meta`` in name order, where SMAP's loader
finds DECODE's groups by position). Which optional columns were written (``decode_mem_extras``) is recorded too: the
``prob`` of 1 and σz of NaN that fill DECODE's columns where a table has none are not read back as values.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from decode_mem.errors import ConfigError, StackError, exception_line
from decode_mem.io._errors import LOW_LEVEL, reading
from decode_mem.io.atomic import atomic_output
from decode_mem.io.provenance import generated_by
from decode_mem.io.table import OPTIONAL, EmitterTable
from decode_mem.io.units import NM_UNIT, px_from_table, table_from_nm, table_from_px

DECODE_VERSION = "0.10.0"  # the emitter-set layout written (DECODE 0.10's save_h5)
FLUSH_ROWS = 65_536
H5_CHUNK = 4096  # rows (a chunk is stored whole, however few rows it holds)
MORE_GROUP = "per_localization"
OTHER = tuple(c for c in OPTIONAL if c not in ("prob", "sigma_x", "sigma_y", "sigma_z", "sigma_photons"))  # columns
# DECODE has none for (two-colour data's channel, dye, ratio): in ``per_localization`` under their own names
DECODE_NM_ORIGIN = 0.0  # DECODE's nm: px * px_size


def is_decode_h5(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an HDF5 file laid out as a DECODE emitter set (``data/xyz`` and ``meta``)."""
    try:
        with h5py.File(path, "r") as f:
            return isinstance(f.get("data/xyz"), h5py.Dataset) and isinstance(f.get("meta"), h5py.Group)
    except LOW_LEVEL:
        return False


def _open(path: str | os.PathLike) -> h5py.File:
    path = Path(path)
    if not path.is_file():
        raise StackError(f"{path}: no such localization file")
    try:
        f = h5py.File(path, "r")
    except LOW_LEVEL as e:
        raise StackError(f"{path}: not a readable HDF5 file: {exception_line(e, with_type=False)}") from e
    try:
        with reading(path, "a DECODE emitter set"):
            laid_out = isinstance(f.get("data/xyz"), h5py.Dataset) and isinstance(f.get("meta"), h5py.Group)
    except StackError:
        f.close()
        raise
    if not laid_out:
        f.close()
        raise StackError(f"{path}: no data/xyz and meta (not a DECODE emitter set)")
    return f


def decode_meta(path: str | os.PathLike) -> dict[str, Any]:
    """``pixel_size`` (nm; None where the pixels are not square), ``width``, ``height`` (px), ``frames`` (decode_mem's
    records; DECODE records none), ``xy_unit`` and ``camera_xy`` (the pixel along decode_mem's x and y, nm, or
    None)."""
    with _open(path) as f, reading(path, "a DECODE emitter set"):
        return _meta(f, Path(path))


def _meta(f: h5py.File, path: Path) -> dict[str, Any]:
    try:
        unit = f["meta"].attrs.get("xy_unit", "px")
        unit = unit.decode() if isinstance(unit, bytes) else str(unit)
        px = f["meta"].attrs.get("px_size")
        px = None if px is None else np.atleast_1d(np.asarray(px, np.float64)).ravel()
        own = f.attrs.get("decode_mem_pixel_size")
    except (TypeError, ValueError) as e:
        raise StackError(f"{path}: unreadable DECODE metadata: {exception_line(e, with_type=False)}") from e
    if unit not in ("px", "nm"):
        raise StackError(f"{path}: DECODE xy_unit {unit!r} (expected 'px' or 'nm')")
    camera_xy: tuple[float, float] | None = None
    if own is not None and float(own) > 0:
        camera_xy = (float(own), float(own))
    elif px is not None and px.size in (1, 2) and np.all(np.isfinite(px)) and np.all(px > 0):
        camera_xy = (float(px[-1]), float(px[0]))  # DECODE's (x, y) = decode_mem's (row, column)
    meta = {"xy_unit": unit, "camera_xy": camera_xy,
            "pixel_size": camera_xy[0] if camera_xy and camera_xy[0] == camera_xy[1] else None}
    for key in ("width", "height", "frames"):
        v = f.attrs.get(f"decode_mem_{key}")
        meta[key] = int(v) if v is not None and int(v) > 0 else None
    return meta


def iter_decode(path: str | os.PathLike, unit: float | None = None, chunk_rows: int = 1 << 20
                ) -> Iterator[EmitterTable]:
    """Yield the emitter set as tables of at most ``chunk_rows`` rows in pixels of ``unit`` nm (None: the camera
    pixel; the file's own pixels where it records none), frames 0-based."""
    path = Path(path)
    with _open(path) as f, reading(path, "a DECODE emitter set"):
        meta = _meta(f, path)
        data = f["data"]
        xyz = data["xyz"]
        if xyz.ndim != 2 or xyz.shape[1] not in (2, 3):
            raise StackError(f"{path}: data/xyz has shape {xyz.shape} (expected N x 3)")
        n = xyz.shape[0]

        def column(name: str) -> h5py.Dataset | None:
            ds = data.get(name)
            if not isinstance(ds, h5py.Dataset) or ds.shape is None:
                return None
            if ds.shape[0] != n:
                raise StackError(f"{path}: data/{name} has {ds.shape[0]} rows for {n} emitters")
            return ds

        if column("frame_ix") is None:
            raise StackError(f"{path}: no data/frame_ix")
        cx, cy = meta["camera_xy"] or (None, None)
        in_nm = meta["xy_unit"] == "nm"
        if unit is None:
            unit = meta["pixel_size"] or (NM_UNIT if in_nm or cx is not None else None)
        sig, cr = column("xyz_sig"), column("xyz_cr")
        written = f.attrs.get("decode_mem_extras")
        written = None if written is None else {str(w.decode() if isinstance(w, bytes) else w) for w in written}
        for start in range(0, max(n, 1), chunk_rows):
            stop = min(start + chunk_rows, n)
            block = np.asarray(xyz[start:stop], np.float64)
            rows, cols = block[:, 0], block[:, 1]  # DECODE's x: rows (decode_mem's y)
            z = block[:, 2] if block.shape[1] == 3 else np.zeros(stop - start)
            if in_nm:
                x = table_from_nm(cols, unit, cx, DECODE_NM_ORIGIN)
                y = table_from_nm(rows, unit, cy, DECODE_NM_ORIGIN)
                scale_x = scale_y = 1.0 / unit
            elif unit is None or cx is None:
                x, y, scale_x, scale_y = cols, rows, 1.0, 1.0  # its own pixels
            else:
                x, y = table_from_px(cols, cx, unit), table_from_px(rows, cy, unit)
                scale_x, scale_y = cx / unit, cy / unit
            columns: dict[str, np.ndarray] = {"frame": np.asarray(data["frame_ix"][start:stop]).astype(np.int64),
                                              "x": x, "y": y, "z": z}
            phot, bg, prob = column("phot"), column("bg"), column("prob")
            columns["photons"] = phot[start:stop] if phot is not None else np.zeros(stop - start)
            columns["bg"] = bg[start:stop] if bg is not None else np.zeros(stop - start)
            if prob is not None:
                columns["prob"] = prob[start:stop]
            err = (np.asarray(sig[start:stop], np.float64) if sig is not None
                   else np.sqrt(np.asarray(cr[start:stop], np.float64)) if cr is not None else None)
            if err is not None and err.ndim == 2 and err.shape[1] >= 2:
                columns["sigma_x"], columns["sigma_y"] = err[:, 1] * scale_x, err[:, 0] * scale_y
                if err.shape[1] == 3:
                    columns["sigma_z"] = err[:, 2]
            ps = column("phot_sig")
            if ps is not None:
                columns["sigma_photons"] = ps[start:stop]
            for c in OTHER:
                ds = f.get(f"{MORE_GROUP}/{c}")
                if isinstance(ds, h5py.Dataset) and ds.shape is not None and ds.shape[:1] == (n,):
                    columns[c] = ds[start:stop]
            if written is not None:  # decode_mem's file: the optional columns it was written with, no more
                columns = {k: v for k, v in columns.items() if k not in OPTIONAL or k in written}
            yield EmitterTable(columns)


def read_decode(path: str | os.PathLike, unit: float | None = None) -> EmitterTable:
    return EmitterTable.concat(iter_decode(path, unit))


class DecodeWriter:
    """Streaming DECODE emitter-set writer: ``write(table, more)`` appends to resizable datasets of ``data``.

    ``unit``: the tables' pixel (nm); ``camera_pixel``: the camera's (nm), which DECODE's pixels are: required.
    Rows are buffered up to 65,536 and appended in one resize; the file appears under its name when complete.
    ``more``: further columns, into the group ``per_localization`` (``group`` also into DECODE's ``id``).
    """

    def __init__(self, path: str | os.PathLike, *, unit: float, camera_pixel: float | None,
                 width: int | None = None, height: int | None = None, frames: int | None = None,
                 extras: tuple[str, ...] = (), three_d: bool = True, more: tuple[str, ...] = ()) -> None:
        self.path = Path(path)
        if camera_pixel is None:
            raise ConfigError(f"{self.path}: a DECODE file is in camera pixels: give the camera pixel size "
                              f"(--pixel_size, nm)")
        if not unit > 0 or not camera_pixel > 0:
            raise ConfigError(f"{self.path}: the pixel sizes must be > 0 nm, got {unit}, {camera_pixel}")
        self.unit, self.camera = float(unit), float(camera_pixel)
        self.width, self.height, self.frames = width, height, frames
        self.extras = tuple(e for e in extras if e in OPTIONAL)
        self.three_d, self.more = bool(three_d), tuple(more)
        self.has_sigma = "sigma_x" in self.extras and "sigma_y" in self.extras
        self._atomic = ExitStack()
        self._file: h5py.File | None = None
        self._buffer: list[dict[str, np.ndarray]] = []
        self._buffered = self._rows = 0
        self._max_frame = -1

    def _datasets(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """The resizable datasets of ``data`` (row shape, dtype) and ``per_localization``."""
        sets: dict[str, tuple[tuple[int, ...], str]] = {
            "data/xyz": ((3,), "<f4"), "data/phot": ((), "<f4"), "data/frame_ix": ((), "<i8"), "data/id": ((), "<i8"),
            "data/prob": ((), "<f4"), "data/bg": ((), "<f4")}
        if self.has_sigma:
            sets["data/xyz_sig"] = ((3,), "<f4")
        if "sigma_photons" in self.extras:
            sets["data/phot_sig"] = ((), "<f4")
        for m in (*self.more, *(c for c in OTHER if c in self.extras)):
            sets[f"{MORE_GROUP}/{m}"] = ((), "<f8")
        return sets

    def __enter__(self) -> DecodeWriter:
        tmp = self._atomic.enter_context(atomic_output(self.path))
        self._file = f = h5py.File(tmp, "w")
        f.create_group("data")
        decode = f.create_group("decode")
        decode.attrs["version"] = DECODE_VERSION
        meta = f.create_group("meta")
        meta.attrs["xy_unit"] = "px"
        meta.attrs["px_size"] = np.array([self.camera, self.camera], np.float32)
        for name, (shape, dtype) in self._datasets().items():
            f.create_dataset(name, shape=(0, *shape), maxshape=(None, *shape), dtype=dtype,
                             chunks=(H5_CHUNK, *shape))
        for name in ("xyz_cr", "phot_cr", "bg_cr", "bg_sig") + (() if self.has_sigma else ("xyz_sig",)) + (
                () if "sigma_photons" in self.extras else ("phot_sig",)):
            f["data"].create_dataset(name, data=h5py.Empty("f"))
        return self

    def records(self, table: EmitterTable, more: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``table``'s rows as the datasets' values."""
        n = len(table)
        rows = px_from_table(table["y"], self.unit, self.camera)
        cols = px_from_table(table["x"], self.unit, self.camera)
        out = {"data/xyz": np.stack([rows, cols, table["z"].astype(np.float64)], axis=1).astype(np.float32),
               "data/phot": table["photons"], "data/frame_ix": table["frame"].astype(np.int64),
               "data/prob": table["prob"] if "prob" in self.extras else np.ones(n, np.float32),
               "data/bg": table["bg"],
               "data/id": np.asarray(more["group"], np.int64) if "group" in self.more else np.full(n, -1, np.int64)}
        if self.has_sigma:
            s = self.unit / self.camera
            sz = table["sigma_z"] if "sigma_z" in self.extras else np.full(n, np.nan, np.float32)
            out["data/xyz_sig"] = np.stack([table["sigma_y"].astype(np.float64) * s,
                                            table["sigma_x"].astype(np.float64) * s, sz], axis=1).astype(np.float32)
        if "sigma_photons" in self.extras:
            out["data/phot_sig"] = table["sigma_photons"]
        for m in self.more:
            out[f"{MORE_GROUP}/{m}"] = np.asarray(more[m], np.float64)
        for c in OTHER:
            if c in self.extras:
                out[f"{MORE_GROUP}/{c}"] = table[c].astype(np.float64)
        return out

    def write(self, table: EmitterTable, more: Mapping[str, np.ndarray] | None = None) -> None:
        if len(table) == 0:
            return
        missing = [e for e in self.extras if e not in table]
        if missing:
            raise ValueError(f"DecodeWriter: table has no {missing} columns")
        if int(table["frame"].min()) < 0:
            raise ValueError("DecodeWriter: negative frame index")
        self._buffer.append(self.records(table, more or {}))
        self._buffered += len(table)
        self._max_frame = max(self._max_frame, int(table["frame"].max()))
        if self._buffered >= FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        k = self._buffered
        for name in self._datasets():
            ds = self._file[name]
            ds.resize((self._rows + k, *ds.shape[1:]))
            ds[self._rows:] = np.concatenate([b[name] for b in self._buffer])
        self._rows += k
        self._buffer, self._buffered = [], 0

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if exc_type is None:
                self._flush()
                attrs = self._file.attrs
                attrs["decode_mem_pixel_size"] = self.camera
                attrs["decode_mem_frames"] = self.frames if self.frames is not None else max(self._max_frame + 1, 1)
                for key, value in (("width", self.width), ("height", self.height)):
                    if value:
                        attrs[f"decode_mem_{key}"] = int(value)
                attrs["generated_by"] = generated_by()
                attrs["decode_mem_extras"] = [e for e in self.extras if e != "sigma_z" or self.has_sigma]
                self._file.close()
        except BaseException as e:
            exc_type, exc, tb = type(e), e, e.__traceback__
            raise
        finally:
            if self._file is not None:
                self._file.close()
            self._buffer = []
            self._atomic.__exit__(exc_type, exc, tb)
