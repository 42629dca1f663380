"""ShareLoc ``.smlm`` files: a zip of ``manifest.json`` and binary tables (imodpasteur/smlm-file-format,
``specification.md``, format version 0.2).

The manifest's ``formats`` describe each table: ``headers``, ``dtype`` (numpy's names), ``shape`` (1 per value)
and ``units``; its ``files`` name each table file, its format, ``rows``, per-column ``offset`` (added to what is
stored), ``min``/``max``. A binary table is its rows one after the other, each row its columns' values packed
in the order of ``headers``, little-endian. x, y, z are nm unless ``units`` says otherwise.

Read: every binary table of the file, in order, streamed out of the zip. Headers are matched by name: ShareLoc's
(``x``, ``y``, ``z``, ``frame``, ``intensity``, ``background``, ``x_precision``...), Locan's (``position_x``,
``local_background``, ``uncertainty_x``...) and ThunderSTORM's as ShareLoc imports them (``intensity_photon_``,
``uncertainty_xy_nm_``...). The specification does not fix whether frames count from 0 or 1: decode_mem's own files
say so in the manifest; in others a frame 0 (``min``, or a pass over the column where the manifest records none)
means 0-based, else they are taken as 1-based, as ThunderSTORM's.

Written: one table, float32 columns (ShareLoc.XYZ's own writer and viewer read every column as 4-byte floats), rows
streamed into the zip (DEFLATE, zip64): x, y, z (3-D), frame (1-based), intensity, background, the precisions,
then further columns; ``min``/``max`` per column; the pixel size, frame size and frames under ``decode_mem``.
float32 nm hold positions to 1/16 nm up to 130 µm and frames exactly up to 2^24.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import numpy as np

from decode_mem.errors import ConfigError, DecodeMemError, StackError, exception_line
from decode_mem.io._errors import LOW_LEVEL, reading
from decode_mem.io.atomic import atomic_output
from decode_mem.io.provenance import generated_by
from decode_mem.io.table import OPTIONAL, EmitterTable
from decode_mem.io.units import NM_UNIT, nm_from_table, table_from_nm

FORMAT_VERSION = "0.2"
TABLE_NAME = "table-0.bin"
FORMAT_NAME = "smlm-table(binary)-0"
MAX_FRAME = 2**24  # float32 holds whole numbers exactly below this
DEFLATE_LEVEL = 1  # fast: float tables compress little more at higher levels
READ_BYTES = 1 << 24
LENGTH_UNITS = {"": 1.0, "nm": 1.0, "nanometer": 1.0, "um": 1e3, "µm": 1e3, "micrometer": 1e3, "micron": 1e3,
                "mm": 1e6, "m": 1e9, "pm": 1e-3, "angstrom": 0.1}
DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float32", "float64")
# table column -> the headers read for it (normalized: lower case, runs of other characters as one '_', trimmed)
READ_NAMES = {
    "x": ("x", "position_x", "x_nm", "xnm", "x_position"), "y": ("y", "position_y", "y_nm", "ynm", "y_position"),
    "z": ("z", "position_z", "z_nm", "znm", "z_position"), "frame": ("frame", "frames", "frame_ix"),
    "photons": ("intensity", "intensity_photon", "photons", "phot"),
    "bg": ("background", "local_background", "offset_photon", "bg", "background_photon"),
    "sigma_x": ("x_precision", "uncertainty_x", "x_uncertainty", "uncertainty_xy_nm", "uncertainty_nm",
                "uncertainty", "precision"),
    "sigma_y": ("y_precision", "uncertainty_y", "y_uncertainty", "uncertainty_xy_nm", "uncertainty_nm",
                "uncertainty", "precision"),
    "sigma_z": ("z_precision", "uncertainty_z", "z_uncertainty", "uncertainty_z_nm"),
    "sigma_photons": ("intensity_precision", "intensity_uncertainty"),
    "prob": ("prob", "probability"),
}
READ_NAMES.update({c: (c,) for c in OPTIONAL if c not in READ_NAMES})  # further columns under their own names
LENGTHS = ("x", "y", "z", "sigma_x", "sigma_y", "sigma_z")
WRITE_NAMES = {"x": "x", "y": "y", "z": "z", "frame": "frame", "photons": "intensity", "bg": "background",
               "sigma_x": "x_precision", "sigma_y": "y_precision", "sigma_z": "z_precision",
               "sigma_photons": "intensity_precision", "prob": "prob"}
WRITE_NAMES.update({c: c for c in OPTIONAL if c not in WRITE_NAMES})
WRITE_UNITS = {"x": "nm", "y": "nm", "z": "nm", "frame": "frame", "photons": "photon", "bg": "photon",
               "sigma_x": "nm", "sigma_y": "nm", "sigma_z": "nm", "sigma_photons": "photon"}


def normalized(header: str) -> str:
    """A header as ShareLoc's viewer names it (other characters as '_', leading ones dropped), lower case."""
    return re.sub(r"[^a-z0-9]+", "_", header.lower()).strip("_")


class _Table:
    """One binary table of a ``.smlm`` file: its record dtype, rows, columns and where the table's columns are."""

    def __init__(self, path: Path, manifest: dict[str, Any], info: dict[str, Any]) -> None:
        self.path, self.info, self.name = path, info, str(info.get("name", ""))
        fmt = manifest.get("formats", {}).get(info.get("format"))
        if not isinstance(fmt, dict):
            raise StackError(f"{path}: table {self.name!r} names the format {info.get('format')!r}, which the manifest "
                             f"does not define")
        if fmt.get("mode") != "binary":
            raise StackError(f"{path}: table {self.name!r} is a {fmt.get('mode')!r} table; decode_mem reads binary "
                             f"tables")
        headers, dtypes = list(fmt.get("headers", [])), list(fmt.get("dtype", []))
        shapes = list(fmt.get("shape", [1] * len(headers)))
        units = list(fmt.get("units", [""] * len(headers)))
        if not headers or not (len(headers) == len(dtypes) == len(shapes)):
            raise StackError(f"{path}: table {self.name!r}: headers, dtype and shape differ in length")
        fields = []
        for h, d, s in zip(headers, dtypes, shapes, strict=True):
            if str(d) not in DTYPES:
                raise StackError(f"{path}: table {self.name!r}: column {h!r} has dtype {d!r}")
            shape = tuple(int(v) for v in (s if isinstance(s, list) else [s]))
            fields.append((f"c{len(fields)}", np.dtype(str(d)).newbyteorder("<"), shape if shape != (1,) else ()))
        self.dtype = np.dtype(fields)
        self.rows = int(info.get("rows", -1))
        if self.rows < 0:
            raise StackError(f"{path}: table {self.name!r} does not say how many rows it has")
        self.headers = [normalized(str(h)) for h in headers]
        self.units = [str(u).strip().lower() for u in units] + [""] * (len(headers) - len(units))
        offsets = info.get("offset", {}) or {}
        self.offsets = {normalized(str(k)): float(v) for k, v in offsets.items() if float(v) != 0}
        self.min = {normalized(str(k)): v for k, v in (info.get("min", {}) or {}).items()}
        self.where: dict[str, int] = {}
        for column, names in READ_NAMES.items():
            for name in names:
                if name in self.headers and self.dtype[self.headers.index(name)].shape == ():
                    self.where[column] = self.headers.index(name)
                    break
        missing = [c for c in ("x", "y") if c not in self.where]
        if missing:
            raise StackError(f"{path}: table {self.name!r} has no {' or '.join(missing)} column (headers "
                             f"{', '.join(headers)})")

    def scale(self, column: str, pixel: float | None) -> float:
        """nm per stored unit of a length column (ConfigError for a unit that is not a length decode_mem knows)."""
        unit = self.units[self.where[column]]
        if unit in LENGTH_UNITS:
            return LENGTH_UNITS[unit]
        if unit in ("px", "pixel", "pixels", "camera pixel"):
            if pixel is None:
                raise StackError(f"{self.path}: column {self.headers[self.where[column]]!r} is in pixels and the file "
                                 f"records no pixel size")
            return pixel
        raise StackError(f"{self.path}: column {self.headers[self.where[column]]!r} has the unit {unit!r}, not a "
                         f"length")

    def values(self, block: np.ndarray, column: str) -> np.ndarray:
        i = self.where[column]
        v = block[f"c{i}"].astype(np.float64)
        off = self.offsets.get(self.headers[i])
        return v + off if off else v


def _manifest(zf: zipfile.ZipFile, path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(zf.read("manifest.json").decode("utf-8"))
    except KeyError:
        raise StackError(f"{path}: no manifest.json in the zip (not a .smlm file)") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise StackError(f"{path}: manifest.json is not valid JSON: {exception_line(e, with_type=False)}") from e
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise StackError(f"{path}: manifest.json lists no files")
    return manifest


class _SmlmFile:
    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise StackError(f"{self.path}: no such localization file")
        try:
            self.zf = zipfile.ZipFile(self.path)
        except LOW_LEVEL as e:
            raise StackError(f"{self.path}: not a zip archive (.smlm): {exception_line(e, with_type=False)}") from e
        try:
            self.manifest = _manifest(self.zf, self.path)
            self.tables = [_Table(self.path, self.manifest, f) for f in self.manifest["files"]
                           if isinstance(f, dict) and f.get("type") == "table"]
            if not self.tables:
                raise StackError(f"{self.path}: the manifest lists no table")
            names = set(self.zf.namelist())
            lost = [t.name for t in self.tables if t.name not in names]
            if lost:
                raise StackError(f"{self.path}: the manifest's tables {lost} are not in the zip")
        except DecodeMemError:
            self.zf.close()
            raise
        except LOW_LEVEL as e:
            self.zf.close()
            raise StackError(f"{self.path}: unreadable manifest.json: {exception_line(e)}") from e

    def own(self) -> dict[str, Any]:
        own = self.manifest.get("decode_mem")
        return own if isinstance(own, dict) else {}

    def meta(self) -> dict[str, Any]:
        own = self.own()
        pixel = own.get("pixel_size") if "pixel_size" in own else self.tables[0].info.get("pixel_size")
        out = {"pixel_size": float(pixel) if isinstance(pixel, (int, float)) and pixel > 0 else None}
        for key in ("width", "height", "frames"):
            v = own.get(key)
            out[key] = int(v) if isinstance(v, (int, float)) and v > 0 else None
        return out

    def blocks(self, table: _Table, rows: int) -> Iterator[np.ndarray]:
        """The table's records, ``rows`` at a time, decompressed as they are read."""
        size = table.dtype.itemsize
        try:
            entry = self.zf.getinfo(table.name)
            if entry.file_size != table.rows * size:
                raise StackError(f"{self.path}: {table.name} holds {entry.file_size} bytes, not the {table.rows} rows "
                                 f"of {size} bytes its manifest says")
            with self.zf.open(entry) as fh:
                left = table.rows
                while left:
                    k = min(rows, left)
                    data = _read_exactly(fh, k * size)
                    if len(data) != k * size:
                        raise StackError(f"{self.path}: {table.name} ends before its {table.rows} rows")
                    yield np.frombuffer(data, table.dtype)
                    left -= k
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError) as e:
            raise StackError(f"{self.path}: {table.name} cannot be read from the zip: "
                             f"{exception_line(e, with_type=False)}") from e

    def frame_base(self, table: _Table) -> int:
        """0 or 1: where the table's frames count from (module docstring)."""
        own = self.own()
        if "frame_base" in own:
            return int(own["frame_base"])
        if "frame" not in table.where:
            return 0
        lowest = table.min.get(table.headers[table.where["frame"]])
        if not isinstance(lowest, (int, float)):
            lowest = min((float(np.min(table.values(b, "frame"))) for b in self.blocks(table, 1 << 20) if len(b)),
                         default=1.0)
        return 0 if lowest < 1 else 1

    def close(self) -> None:
        self.zf.close()

    def __enter__(self) -> _SmlmFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_exactly(fh: IO[bytes], n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        part = fh.read(min(n - got, READ_BYTES))
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def smlm_meta(path: str | os.PathLike) -> dict[str, Any]:
    """``pixel_size`` (nm), ``width``, ``height`` (px), ``frames`` where the file records them (None elsewhere)."""
    with _SmlmFile(path) as f, reading(path, "a ShareLoc .smlm file"):
        return f.meta()


def smlm_has_z(path: str | os.PathLike) -> bool:
    """Whether a table of the file has a z column."""
    with _SmlmFile(path) as f:
        return any("z" in t.where for t in f.tables)


def iter_smlm(path: str | os.PathLike, unit: float | None = None, chunk_rows: int = 1 << 20
              ) -> Iterator[EmitterTable]:
    """Yield every table of the file as tables of at most ``chunk_rows`` rows in pixels of ``unit`` nm (None: the
    recorded pixel, else 1 nm), frames 0-based."""
    with _SmlmFile(path) as f, reading(path, "a ShareLoc .smlm file"):
        pixel = f.meta()["pixel_size"]
        unit = float(unit) if unit else (pixel or NM_UNIT)
        empty = True
        for table in f.tables:
            base = f.frame_base(table)
            scales = {c: table.scale(c, pixel) for c in LENGTHS if c in table.where}
            for block in f.blocks(table, chunk_rows):
                n = len(block)
                columns: dict[str, np.ndarray] = {
                    "frame": (np.rint(table.values(block, "frame")).astype(np.int64) - base if "frame" in table.where
                              else np.zeros(n, np.int64)),
                    "x": table_from_nm(table.values(block, "x") * scales["x"], unit, None),
                    "y": table_from_nm(table.values(block, "y") * scales["y"], unit, None),
                    "z": table.values(block, "z") * scales["z"] if "z" in table.where else np.zeros(n),
                    "photons": table.values(block, "photons") if "photons" in table.where else np.zeros(n),
                    "bg": table.values(block, "bg") if "bg" in table.where else np.zeros(n),
                }
                if "sigma_x" in table.where and "sigma_y" in table.where:
                    columns["sigma_x"] = table.values(block, "sigma_x") * scales["sigma_x"] / unit
                    columns["sigma_y"] = table.values(block, "sigma_y") * scales["sigma_y"] / unit
                if "sigma_z" in table.where:
                    columns["sigma_z"] = table.values(block, "sigma_z") * scales["sigma_z"]
                for c in OPTIONAL:
                    if c in table.where and c not in columns and c not in LENGTHS:
                        columns[c] = table.values(block, c)
                empty = False
                yield EmitterTable(columns)
        if empty:
            yield EmitterTable.empty()


def read_smlm(path: str | os.PathLike, unit: float | None = None) -> EmitterTable:
    return EmitterTable.concat(iter_smlm(path, unit))


class SmlmWriter:
    """Streaming ``.smlm`` writer: ``write(table, more)`` appends rows to the zip's table; the manifest is written
    at the end (rows, min, max), and the file appears under its name when complete.

    ``unit``: the tables' pixel (nm); ``camera_pixel``: the camera's (nm, recorded; None: not known).
    """

    def __init__(self, path: str | os.PathLike, *, unit: float, camera_pixel: float | None,
                 width: int | None = None, height: int | None = None, frames: int | None = None,
                 extras: tuple[str, ...] = (), three_d: bool = True, more: tuple[str, ...] = (),
                 source: str | None = None) -> None:
        self.path = Path(path)
        if not unit > 0 or (camera_pixel is not None and not camera_pixel > 0):
            raise ConfigError(f"{self.path}: the pixel sizes must be > 0 nm, got {unit}, {camera_pixel}")
        self.unit, self.camera = float(unit), None if camera_pixel is None else float(camera_pixel)
        self.width, self.height, self.frames, self.source = width, height, frames, source
        extras = tuple(e for e in extras if e in OPTIONAL)
        if ("sigma_x" in extras) != ("sigma_y" in extras):
            extras = tuple(e for e in extras if e not in ("sigma_x", "sigma_y"))
        self.columns = ["x", "y", *(["z"] if three_d else []), "frame", "photons", "bg",
                        *[e for e in ("sigma_x", "sigma_y") if e in extras],
                        *[e for e in OPTIONAL if e not in ("sigma_x", "sigma_y")
                          and e in extras and (three_d or e != "sigma_z")]]
        self.more = tuple(more)
        clash = [m for m in self.more if m in WRITE_NAMES.values()]
        if clash:
            raise ValueError(f"SmlmWriter: columns {clash} are the table's own")
        self.headers = [WRITE_NAMES[c] for c in self.columns] + list(self.more)
        self.dtype = np.dtype([(h, "<f4") for h in self.headers])
        self._atomic = ExitStack()
        self._zip: zipfile.ZipFile | None = None
        self._fh: IO[bytes] | None = None
        self._rows = 0
        self._min = np.full(len(self.headers), np.inf)
        self._max = np.full(len(self.headers), -np.inf)

    def __enter__(self) -> SmlmWriter:
        tmp = self._atomic.enter_context(atomic_output(self.path))
        self._zip = zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=DEFLATE_LEVEL,
                                    allowZip64=True)
        self._fh = self._zip.open(TABLE_NAME, "w", force_zip64=True)
        return self

    def records(self, table: EmitterTable, more: Mapping[str, np.ndarray]) -> np.ndarray:
        """``table``'s rows as the file's records (float32)."""
        rec = np.empty(len(table), self.dtype)
        for c in self.columns:
            if c == "frame":
                values = table["frame"] + 1
                if len(values) and int(values.max()) >= MAX_FRAME:
                    raise ConfigError(f"{self.path}: frame {int(values.max())} does not fit ShareLoc's float32 "
                                      f"columns (at most {MAX_FRAME - 1})")
            elif c in ("x", "y"):
                values = nm_from_table(table[c], self.unit, None)
            elif c in ("sigma_x", "sigma_y"):
                values = table[c].astype(np.float64) * self.unit
            else:
                values = table[c]
            rec[WRITE_NAMES[c]] = values
        for m in self.more:
            rec[m] = more[m]
        return rec

    def write(self, table: EmitterTable, more: Mapping[str, np.ndarray] | None = None) -> None:
        if len(table) == 0:
            return
        missing = [c for c in self.columns if c not in table]
        if missing:
            raise ValueError(f"SmlmWriter: table has no {missing} columns")
        rec = self.records(table, more or {})
        self._fh.write(rec.tobytes())
        self._rows += len(rec)
        for i, h in enumerate(self.headers):
            v = rec[h]
            finite = v[np.isfinite(v)]
            if len(finite):
                self._min[i] = min(self._min[i], float(finite.min()))
                self._max[i] = max(self._max[i], float(finite.max()))

    def manifest(self) -> dict[str, Any]:
        units = [WRITE_UNITS.get(c, "") for c in self.columns] + [""] * len(self.more)
        fmt = {"name": FORMAT_NAME, "type": "table", "mode": "binary", "extension": ".bin",
               "columns": len(self.headers), "headers": self.headers, "dtype": ["float32"] * len(self.headers),
               "shape": [1] * len(self.headers), "units": units,
               "description": "localization table written by decode_mem: x, y, z in nm from the image's outer "
                              "corner, frames from 1"}
        seen = self._rows > 0
        info = {"name": TABLE_NAME, "type": "table", "format": FORMAT_NAME, "channel": "default", "rows": self._rows,
                "offset": {h: 0 for h in self.headers},
                "min": {h: float(v) for h, v in zip(self.headers, self._min, strict=True) if seen and np.isfinite(v)},
                "max": {h: float(v) for h, v in zip(self.headers, self._max, strict=True) if seen and np.isfinite(v)}}
        if self.camera is not None:
            info["pixel_size"] = self.camera
        frames = self.frames if self.frames is not None else (int(self._max[self.headers.index("frame")])
                                                              if seen else 0)
        own = {"pixel_size": self.camera, "width": self.width, "height": self.height, "frames": frames,
               "frame_base": 1, "generated_by": generated_by()}
        return {"format_version": FORMAT_VERSION, "formats": {FORMAT_NAME: fmt}, "files": [info],
                "name": self.path.stem, "description": f"localizations of {self.source}" if self.source else "",
                "tags": ["SMLM"], "thumbnail": "", "sample": "", "labeling": "", "date": "", "decode_mem": own}

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self._fh.close()
            if exc_type is None:
                self._zip.writestr("manifest.json", json.dumps(self.manifest(), indent=1))
            self._zip.close()
        except BaseException as e:
            exc_type, exc, tb = type(e), e, e.__traceback__
            raise
        finally:
            self._zip.close()
            self._atomic.__exit__(exc_type, exc, tb)
