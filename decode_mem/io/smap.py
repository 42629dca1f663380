"""SMAP localizations: ``*_sml.mat`` files, the struct ``saveloc`` (jries/SMAP: ``LocalizationData.savelocs``,
read by its ``Loader_sml``/``load_smlV3``).

Layout (checked against a real SMAP file, tests/data/tables/smap, and SMAP's source):

- ``saveloc.loc``: one column per field, all of the same length: ``frame`` (1-based), ``xnm``, ``ynm``, ``znm``
  (nm), ``phot`` (photons), ``bg`` (photons per pixel), ``locprecnm`` (lateral precision, nm: SMAP drops
  localizations above 250 nm or NaN when it loads a file), ``locprecznm``, ``xnmerr``/``ynmerr`` (per axis),
  ``photerr``, and more that are ignored here. SMAP's fitters give ``xnm = xpix * pixel`` with ``xpix`` MATLAB's
  1-based pixel coordinate (the first pixel's centre at 1: ``fitloc2locdata``, the cut-outs of ``RoiCutterWF``),
  so ``xnm = (x + 1) * pixel`` for decode_mem's 0-based ``x``.
- ``saveloc.file.info``: ``cam_pixelsize_um`` (x, y), ``Width``, ``Height``, ``roi``, ``numberOfFrames``. The last is
  not taken as the number of frames: SMAP's own files hold localizations past it (the real one: numberOfFrames 1000,
  frames 1 to 1001), so only decode_mem's own record says how many frames a movie had.

Read: MATLAB v7.3 (HDF5) with h5py in chunks; v7 and older (scipy.io) whole, so only up to ``V5_MAX_BYTES`` (save a
larger file as v7.3 in MATLAB: ``save -v7.3``). Written: v7.3 through h5py, streamed: every field a resizable
column, double. decode_mem's own numbers go into ``saveloc.file.info.decode_mem`` (the camera pixel where known,
where ``locprecnm`` came from) and are read back from there.
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

from decode_mem.errors import ConfigError, DecodeMemError, StackError, exception_line
from decode_mem.io import _matlab
from decode_mem.io._errors import LOW_LEVEL, reading
from decode_mem.io.atomic import atomic_output
from decode_mem.io.provenance import generated_by
from decode_mem.io.table import OPTIONAL, EmitterTable
from decode_mem.io.units import NM_UNIT, nm_from_table, table_from_nm

ORIGIN = 1.0  # SMAP's nm: (x + 1) * pixel (MATLAB's 1-based pixels)
V5_MAX_BYTES = 256 * 2**20  # a v7 file is read whole: larger ones must be v7.3
FLUSH_ROWS = 65_536
H5_CHUNK = 4096  # rows: 32 KiB per field (a chunk is stored whole, however few rows it holds)
DEFAULT_PRECISION = "150/sqrt(phot): SMAP's own default for a table without a precision"
SMAP_DEFAULT_PIXEL = 100.0  # nm: what SMAP takes for a table without a camera pixel (Loader_csvAndMore)
CORE = ("prob", "sigma_x", "sigma_y", "sigma_z", "sigma_photons")  # optional columns SMAP has fields for
OTHER_FIELDS = {c: {"channel": "colour_channel"}.get(c, c) for c in OPTIONAL if c not in CORE}  # SMAP's channel is
# its own (0-based channel of a multi-channel file): decode_mem's two-colour channel keeps a field of its own


def smap_meta(path: str | os.PathLike) -> dict[str, Any]:
    """``pixel_size`` (nm; None where the pixel is not square or not known), ``width``, ``height`` (px),
    ``frames``; also ``camera_xy`` (the pixel in x and y, nm, or None)."""
    with _SmapFile(path) as f, reading(path, "a SMAP file"):
        return f.meta()


def smap_fields(path: str | os.PathLike) -> list[str]:
    """The numeric fields of ``saveloc.loc``."""
    with _SmapFile(path) as f:
        return list(f.names)


def iter_smap(path: str | os.PathLike, unit: float | None = None, chunk_rows: int = 1 << 20
              ) -> Iterator[EmitterTable]:
    """Yield ``saveloc.loc`` as tables of at most ``chunk_rows`` rows in pixels of ``unit`` nm (None: the camera
    pixel, or 1 nm where it is not known), frames 0-based."""
    with _SmapFile(path) as f, reading(path, "a SMAP file"):
        meta = f.meta()
        camera = meta["camera_xy"]
        unit = float(unit) if unit else (meta["pixel_size"] or NM_UNIT)
        names = f.names
        missing = [c for c in ("frame", "xnm", "ynm") if c not in names]
        if missing:
            raise StackError(f"{f.path}: saveloc.loc lacks the fields {missing} (not a SMAP localization file)")
        own_precision = f.info_decode_mem().get("locprecnm", "") != DEFAULT_PRECISION
        for start in range(0, max(f.n, 1), chunk_rows):
            stop = min(start + chunk_rows, f.n)
            def col(name: str, start: int = start, stop: int = stop) -> np.ndarray:
                return f.column(name, start, stop)

            frame = col("frame")
            if not np.all(np.isfinite(frame)):
                raise StackError(f"{f.path}: saveloc.loc.frame holds values that are not frame numbers")
            cx, cy = camera if camera else (None, None)
            columns: dict[str, np.ndarray] = {
                "frame": frame.astype(np.int64) - 1,
                "x": table_from_nm(col("xnm"), unit, cx, ORIGIN),
                "y": table_from_nm(col("ynm"), unit, cy, ORIGIN),
                "z": col("znm") if "znm" in names else np.zeros(stop - start),
                "photons": col("phot") if "phot" in names else np.zeros(stop - start),
                "bg": col("bg") if "bg" in names else np.zeros(stop - start),
            }
            if "xnmerr" in names and "ynmerr" in names:
                columns["sigma_x"], columns["sigma_y"] = col("xnmerr") / unit, col("ynmerr") / unit
            elif "locprecnm" in names and own_precision:
                columns["sigma_x"] = columns["sigma_y"] = col("locprecnm") / unit
            if "locprecznm" in names:
                columns["sigma_z"] = col("locprecznm")
            for ours, theirs in (("sigma_photons", "photerr"), ("prob", "prob"), *OTHER_FIELDS.items()):
                if theirs in names:
                    columns[ours] = col(theirs)
            yield EmitterTable(columns)


def read_smap(path: str | os.PathLike, unit: float | None = None) -> EmitterTable:
    return EmitterTable.concat(iter_smap(path, unit))


class _SmapFile:
    """An open SMAP file, v7.3 or v5: its loc field names, length, column slices and file info."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise StackError(f"{self.path}: no such localization file")
        try:
            self.version = _matlab.mat_version(self.path)
        except OSError as e:
            raise StackError(f"{self.path}: cannot be read: {exception_line(e, with_type=False)}") from e
        self._h5: h5py.File | None = None
        self._v5: dict[str, np.ndarray] = {}
        self._info: dict[str, Any] = {}
        try:
            if self.version == "7.3":
                self._open_h5()
            elif self.version == "5":
                self._open_v5()
            else:
                raise StackError(f"{self.path}: not a MATLAB file (no MATLAB 5.0 or 7.3 header)")
        except DecodeMemError:
            self.close()
            raise
        except LOW_LEVEL as e:
            self.close()
            raise StackError(f"{self.path}: not a readable SMAP file: {exception_line(e)}") from e

    def _open_h5(self) -> None:
        self._h5 = h5py.File(self.path, "r")
        loc = self._h5.get("saveloc/loc")
        if not isinstance(loc, h5py.Group):
            raise StackError(f"{self.path}: no saveloc.loc struct (not a SMAP _sml.mat file)")
        self._loc = loc
        self.names = [k for k in loc if isinstance(loc[k], h5py.Dataset) and loc[k].shape is not None
                      and not _matlab.is_empty(loc[k]) and loc[k].dtype.kind in "fiub" and len(loc[k].shape) == 2]
        lengths = {_length(loc[k].shape) for k in ("frame", "xnm", "ynm") if k in self.names}
        self.n = self._one_length(lengths)
        info = self._h5.get("saveloc/file/info")  # only the info: the file struct may hold images
        self._info = {"info": _matlab.read_value(self._h5, info)} if info is not None else {}

    def _open_v5(self) -> None:
        from scipy.io import loadmat

        size = _matlab.file_size(self.path)
        if size > V5_MAX_BYTES:
            raise StackError(f"{self.path}: a MATLAB v7 file is read whole and this one is {size / 2**20:.0f} MiB "
                             f"(at most {V5_MAX_BYTES // 2**20} MiB): save it as v7.3 in MATLAB (save -v7.3) or "
                             f"SMAP")
        try:
            _matlab.check_v5(self.path, limit=4 * V5_MAX_BYTES)  # scipy's parser trusts what it reads: checked first
        except _matlab.V5Error as e:
            raise StackError(f"{self.path}: not a readable MATLAB v7 file: {exception_line(e, with_type=False)}") from e
        try:
            data = loadmat(self.path, squeeze_me=True, struct_as_record=False, variable_names=["saveloc"])
        except Exception as e:  # scipy's parser on damaged bytes raises what it meets (UnboundLocalError too)
            raise StackError(f"{self.path}: not a readable MATLAB v7 file: {type(e).__name__}") from e
        if "saveloc" not in data or not hasattr(data["saveloc"], "loc"):
            raise StackError(f"{self.path}: no saveloc.loc struct (not a SMAP _sml.mat file)")
        saveloc = data["saveloc"]
        loc = saveloc.loc
        for name in loc._fieldnames:
            value = np.asarray(getattr(loc, name))
            if value.dtype.kind in "fiub" and value.ndim <= 1:
                self._v5[name] = np.atleast_1d(value)
        self.names = list(self._v5)
        self.n = self._one_length({len(self._v5[k]) for k in ("frame", "xnm", "ynm") if k in self._v5})
        file = getattr(saveloc, "file", None)
        self._info = _matlab.v5_struct(file) if file is not None else {}
        if isinstance(self._info, list):
            self._info = self._info[0] if self._info else {}

    def _one_length(self, lengths: set[int]) -> int:
        if len(lengths) > 1 or -1 in lengths:
            raise StackError(f"{self.path}: saveloc.loc's frame, xnm and ynm differ in length")
        return lengths.pop() if lengths else 0

    def column(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of a field, float64."""
        if self._h5 is None:
            return self._v5[name][start:stop].astype(np.float64)
        ds = self._loc[name]
        if _length(ds.shape) != self.n:
            raise StackError(f"{self.path}: saveloc.loc.{name} has {_length(ds.shape)} values for {self.n} "
                             f"localizations")
        values = ds[0, start:stop] if ds.shape[0] == 1 else ds[start:stop, 0]
        return np.asarray(values, np.float64)

    def info(self) -> dict[str, Any]:
        info = self._info.get("info") if isinstance(self._info, dict) else None
        return info if isinstance(info, dict) else {}

    def info_decode_mem(self) -> dict[str, Any]:
        own = self.info().get("decode_mem")
        return own if isinstance(own, dict) else {}

    def meta(self) -> dict[str, Any]:
        info, own = self.info(), self.info_decode_mem()
        camera_xy: tuple[float, float] | None = None
        if "pixel_size_nm" in own:  # decode_mem's record: None where the file's writer knew no camera pixel
            px = own["pixel_size_nm"]
            camera_xy = (float(px), float(px)) if _positive(px) else None
        else:
            um = _floats(info.get("cam_pixelsize_um"))
            if um.size and np.all(np.isfinite(um)) and np.all(um > 0):
                camera_xy = (round(float(um[0]) * 1000, 6), round(float(um[-1]) * 1000, 6))
        roi = _floats(info.get("roi"))
        width = info.get("Width", roi[2] if roi.size >= 4 else None)
        height = info.get("Height", roi[3] if roi.size >= 4 else None)
        frames = own.get("frames")  # decode_mem's record; SMAP's numberOfFrames can be less than its last frame
        return {"pixel_size": camera_xy[0] if camera_xy and camera_xy[0] == camera_xy[1] else None,
                "camera_xy": camera_xy, "width": _count(width), "height": _count(height), "frames": _count(frames)}

    def close(self) -> None:
        if self._h5 is not None:
            self._h5.close()
            self._h5 = None

    def __enter__(self) -> _SmapFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _length(shape: tuple[int, ...]) -> int:
    """The length of a MATLAB vector stored as HDF5 ``shape`` (1 x N or N x 1); -1 for anything else."""
    return shape[1] if shape[0] == 1 else shape[0] if shape[1] == 1 else -1


def _floats(v: Any) -> np.ndarray:
    """A MATLAB number or vector as a 1-D float64 array (empty for anything else)."""
    try:
        return np.atleast_1d(np.asarray(v, np.float64)).ravel() if v is not None else np.zeros(0)
    except (TypeError, ValueError):
        return np.zeros(0)


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and np.isfinite(v) and v > 0


def _count(v: Any) -> int | None:
    return int(v) if _positive(v) and float(v) == int(v) else None


class SmapWriter:
    """Streaming SMAP writer (MATLAB v7.3): ``write(table, more)`` appends to every field of ``saveloc.loc``.

    Rows are buffered up to 65,536 and appended to resizable columns, so memory stays bounded whatever the
    length. ``unit``: the tables' pixel (nm); ``camera_pixel``: the camera's (nm; None: not known, SMAP's
    default 100 nm is written for SMAP, and decode_mem reads the nm back as they are). ``width``/``height``
    default to the localizations' extent and ``frames`` to the largest frame + 1. ``more``: further columns
    (``write``'s mapping), written as fields of their own. The file appears under its name when complete.
    """

    def __init__(self, path: str | os.PathLike, *, unit: float, camera_pixel: float | None,
                 width: int | None = None, height: int | None = None, frames: int | None = None,
                 extras: tuple[str, ...] = (), three_d: bool = True, more: tuple[str, ...] = (),
                 source: str | None = None) -> None:
        self.path = Path(path)
        if not unit or unit <= 0 or (camera_pixel is not None and not camera_pixel > 0):
            raise ConfigError(f"{self.path}: the pixel sizes must be > 0 nm, got {unit}, {camera_pixel}")
        self.unit, self.camera = float(unit), None if camera_pixel is None else float(camera_pixel)
        self.width, self.height, self.frames = width, height, frames
        self.extras = tuple(e for e in extras if e in OPTIONAL)
        self.three_d, self.more, self.source = bool(three_d), tuple(more), source
        self.fields = ["frame", "xnm", "ynm", *(["znm"] if self.three_d else []), "phot", "bg", "locprecnm"]
        if "sigma_x" in self.extras and "sigma_y" in self.extras:
            self.fields += ["xnmerr", "ynmerr"]
        if self.three_d and "sigma_z" in self.extras:
            self.fields.append("locprecznm")
        self.fields += [f for e, f in (("sigma_photons", "photerr"), ("prob", "prob")) if e in self.extras]
        self.fields += [f for e, f in OTHER_FIELDS.items() if e in self.extras]
        clash = [m for m in self.more if m in self.fields]
        if clash:
            raise ValueError(f"SmapWriter: columns {clash} are SMAP's own fields")
        self.fields += list(self.more)
        self._atomic = ExitStack()
        self._file: h5py.File | None = None
        self._buffer: list[dict[str, np.ndarray]] = []
        self._buffered = self._rows = 0
        self._max_frame = -1
        self._max_nm = np.zeros(2)

    def __enter__(self) -> SmapWriter:
        tmp = self._atomic.enter_context(atomic_output(self.path))
        self._file = h5py.File(tmp, "w", userblock_size=_matlab.HEADER_BYTES)
        saveloc = self._file.create_group("saveloc")
        _matlab.mark_struct(saveloc, ["loc", "file"], None)
        loc = saveloc.create_group("loc")
        _matlab.mark_struct(loc, self.fields, "/saveloc")
        for name in self.fields:
            ds = loc.create_dataset(name, shape=(1, 0), maxshape=(1, None), dtype="<f8", chunks=(1, H5_CHUNK))
            ds.attrs["H5PATH"] = np.bytes_(b"/savelocloc")
            ds.attrs["MATLAB_class"] = np.bytes_(b"double")
        return self

    def records(self, table: EmitterTable, more: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``table``'s rows as SMAP's fields (float64)."""
        n = len(table)
        unit, cam = self.unit, self.camera
        out = {"frame": table["frame"].astype(np.float64) + 1,
               "xnm": nm_from_table(table["x"], unit, cam, ORIGIN), "ynm": nm_from_table(table["y"], unit, cam, ORIGIN),
               "phot": table["photons"].astype(np.float64), "bg": table["bg"].astype(np.float64)}
        if self.three_d:
            out["znm"] = table["z"].astype(np.float64)
        if "xnmerr" in self.fields:
            out["xnmerr"] = table["sigma_x"].astype(np.float64) * unit
            out["ynmerr"] = table["sigma_y"].astype(np.float64) * unit
            out["locprecnm"] = np.sqrt((out["xnmerr"] ** 2 + out["ynmerr"] ** 2) / 2)
        else:  # what SMAP computes itself for a table without a precision: it drops rows with a NaN one
            out["locprecnm"] = 150.0 / np.sqrt(np.maximum(out["phot"], 1.0))
        pairs = (("locprecznm", "sigma_z"), ("photerr", "sigma_photons"), ("prob", "prob"),
                 *((f, c) for c, f in OTHER_FIELDS.items()))
        for field, ours in pairs:
            if field in self.fields:
                out[field] = table[ours].astype(np.float64)
        for m in self.more:
            out[m] = np.asarray(more[m], np.float64)
        if any(len(v) != n for v in out.values()):
            raise ValueError("SmapWriter: a column's length differs from the table's")
        return out

    def write(self, table: EmitterTable, more: Mapping[str, np.ndarray] | None = None) -> None:
        if len(table) == 0:
            return
        missing = [e for e in self.extras if e not in table]
        if missing:
            raise ValueError(f"SmapWriter: table has no {missing} columns")
        rec = self.records(table, more or {})
        self._buffer.append(rec)
        self._buffered += len(table)
        self._max_frame = max(self._max_frame, int(table["frame"].max()))
        self._max_nm = np.maximum(self._max_nm, [np.nanmax(rec[c], initial=0.0) for c in ("xnm", "ynm")])
        if self._buffered >= FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        loc = self._file["saveloc/loc"]
        k = self._buffered
        for name in self.fields:
            ds = loc[name]
            ds.resize((1, self._rows + k))
            ds[0, self._rows:] = np.concatenate([b[name] for b in self._buffer])
        self._rows += k
        self._buffer, self._buffered = [], 0

    def file_struct(self) -> dict[str, Any]:
        """``saveloc.file``: the fields SMAP's loaders take (``info``: camera pixel, field, frames)."""
        pixel = self.camera if self.camera is not None else SMAP_DEFAULT_PIXEL
        width = self.width if self.width else int(np.ceil(self._max_nm[0] / pixel))
        height = self.height if self.height else int(np.ceil(self._max_nm[1] / pixel))
        frames = self.frames if self.frames is not None else self._max_frame + 1
        precision = "from sigma_x, sigma_y" if "xnmerr" in self.fields else DEFAULT_PRECISION
        info = {"Width": float(max(width, 1)), "Height": float(max(height, 1)),
                "roi": [0.0, 0.0, float(max(width, 1)), float(max(height, 1))],
                "cam_pixelsize_um": [pixel / 1000, pixel / 1000], "numberOfFrames": float(max(frames, 1)),
                "comment": f"written by {generated_by()}",
                "decode_mem": {"pixel_size_nm": self.camera, "frames": float(max(frames, 1)), "locprecnm": precision,
                               "generated_by": generated_by()}}
        return {"info": info, "average": None, "name": str(self.source or self.path.name), "number": 1.0,
                "numberOfTif": 0.0, "tif": {"image": None, "info": None}, "raw": {"image": None, "frame": None}}

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if exc_type is None:
                self._flush()
                saveloc = self._file["saveloc"]
                _matlab.write_value(saveloc, "file", self.file_struct(), "/saveloc")
                _matlab.write_value(self._file, "fileformat", {"name": "sml"}, None)
                tmp = Path(self._file.filename)
                self._file.close()
                _matlab.write_header(tmp)
        except BaseException as e:
            exc_type, exc, tb = type(e), e, e.__traceback__
            raise
        finally:
            if self._file is not None:
                self._file.close()
            self._buffer = []
            self._atomic.__exit__(exc_type, exc, tb)
