"""One entry point for localization files: every job reads and writes them through here.

Formats (``FORMATS``: by suffix; ``.h5``/``.hdf5`` by content, DECODE or Picasso):

- ``.csv``: ThunderSTORM CSV (decode_mem's or ThunderSTORM's own), nm, frames 1-based;
- ``.hdf5`` (or ``.h5``): Picasso, with its ``.yaml``; camera pixels, frames 0-based;
- ``.h5``: DECODE emitter set; camera pixels, frames 0-based;
- ``.parquet``/``.pq``: the CSV's columns in parquet;
- ``.mat``: SMAP ``_sml.mat`` (MATLAB v7.3 or v7); nm, frames 1-based;
- ``.smlm``: ShareLoc (zip of a manifest and binary tables); nm;
- ``.txt``: rapidSTORM (read only); nm, frames 0-based.

In memory everything is an :class:`EmitterTable` in pixels (centres at integer coordinates), frames 0-based: of
the camera's pixel where the file records one, else of 1 nm (``NM_UNIT``) for a file in nm, so that a table from
another tool needs no camera pixel size to be linked, drift-corrected, rendered or assessed. Only a file in camera
pixels (Picasso, DECODE) written from one in nm needs it. A CSV records no acquisition: the summary of the ``infer``
run that wrote it (``<stem>.json`` beside it, ``run_summary``) does, and ``localization_meta`` reads it there.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import ConfigError, StackError
from decode_mem.io.metadata import finite_number
from decode_mem.io.table import OPTIONAL, EmitterTable, RowCheck
from decode_mem.io.thunderstorm import ThunderstormWriter, iter_thunderstorm, read_header
from decode_mem.io.units import NM_UNIT, px_from_table

FORMATS = {".csv": "csv", ".hdf5": "picasso", ".h5": "decode", ".parquet": "parquet", ".pq": "parquet",
           ".mat": "smap", ".smlm": "smlm", ".txt": "rapidstorm"}
WRITTEN = ("csv", "picasso", "parquet", "smap", "smlm", "decode")  # what decode_mem writes (infer --format)
IN_NM = ("csv", "parquet", "smap", "smlm", "rapidstorm")  # formats that store nm
IN_PIXELS = ("picasso", "decode")  # formats that store camera pixels
SUFFIX = {"csv": ".csv", "picasso": ".hdf5", "parquet": ".parquet", "smap": ".mat", "smlm": ".smlm",
          "decode": ".h5"}
CHUNK_ROWS = 1 << 20


@dataclass(frozen=True)
class LocalizationMeta:
    """What a file says about its acquisition; ``None`` where it does not say."""

    pixel_size: float | None = None  # camera pixel, nm
    width: int | None = None  # px
    height: int | None = None  # px
    frames: int | None = None


def file_format(path: str | os.PathLike) -> str:
    """The format of ``path``: by its suffix, and for an existing ``.h5``/``.hdf5`` by its content (DECODE's
    ``data/xyz`` or Picasso's ``locs``); ConfigError for a suffix that is none of ``FORMATS``'."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ConfigError(f"{path}: unknown localization file type {suffix!r}; use one of {', '.join(FORMATS)}")
    if suffix in (".h5", ".hdf5") and Path(path).is_file():
        from decode_mem.io.decode_h5 import is_decode_h5

        return "decode" if is_decode_h5(path) else "picasso"
    return FORMATS[suffix]


def written_as(path: str | os.PathLike) -> tuple[str, str]:
    """The format and suffix of a file a job makes from ``path`` (``<stem>_link``, ``_undrift``): the input's own
    where decode_mem writes it, else a ThunderSTORM CSV (rapidSTORM)."""
    fmt = file_format(path)
    return (fmt, Path(path).suffix) if fmt in WRITTEN else ("csv", ".csv")


def open_writer(path: str | os.PathLike, *, pixel_size: float | None, unit: float | None = None,
                fmt: str | None = None, width: int | None = None, height: int | None = None,
                frames: int | None = None, extras: tuple[str, ...] = (), **options: Any) -> Any:
    """A streaming, atomic writer for ``path`` (a context manager with ``write(table)``); ``fmt`` (one of
    ``WRITTEN``) defaults to the suffix's.

    ``pixel_size``: the camera pixel (nm) the file records (None: not known; a Picasso or DECODE file, in camera
    pixels, then cannot be written); ``unit``: the pixel (nm) of the tables written (default ``pixel_size``).
    ``extras`` are optional table columns to keep (``prob``, ``sigma_x``, ...). ``width``/``height`` (px) are
    required for Picasso and recorded by every format but CSV; ``options`` go to the format's writer (every format:
    ``three_d``, False leaves z out of the file; Picasso: ``psf_sigma``, ``source``, ``info``; parquet:
    ``row_group_rows``; SMAP, ShareLoc: ``source``; SMAP, ShareLoc, DECODE: ``more``, further columns).
    """
    fmt = fmt or FORMATS.get(Path(path).suffix.lower())
    if fmt not in WRITTEN:
        raise ConfigError(f"{path}: decode_mem writes {', '.join(WRITTEN)} files, not {fmt or Path(path).suffix!r}")
    unknown = [e for e in extras if e not in OPTIONAL]
    if unknown:
        raise ConfigError(f"{path}: unknown extra columns {unknown}; choose from {', '.join(OPTIONAL)}")
    unit = pixel_size if unit is None else unit
    if unit is None or not unit > 0 or (pixel_size is not None and not pixel_size > 0):
        raise ConfigError(f"{path}: pixel sizes must be > 0 nm, got {pixel_size} (camera), {unit} (table)")
    if fmt in IN_PIXELS and pixel_size is None:
        raise ConfigError(f"{path}: a {fmt} file is in camera pixels and these localizations record none: give the "
                          f"camera pixel size (--pixel_size, nm)")
    if fmt == "csv":
        three_d = options.pop("three_d", True)
        if options:
            raise ConfigError(f"{path}: options {sorted(options)} do not apply to CSV")
        return ThunderstormWriter(path, unit, tuple(extras), three_d)
    if fmt == "parquet":
        from decode_mem.io.parquet import ParquetWriter

        writer = ParquetWriter(path, unit, tuple(extras), width=width, height=height, frames=frames, **options)
        writer.meta["pixel_size"] = pixel_size  # the camera's (the file's nm need no pixel to be read)
        return writer
    if fmt in ("smap", "smlm", "decode"):
        from decode_mem.io.decode_h5 import DecodeWriter
        from decode_mem.io.smap import SmapWriter
        from decode_mem.io.smlm import SmlmWriter

        cls = {"smap": SmapWriter, "smlm": SmlmWriter, "decode": DecodeWriter}[fmt]
        return cls(path, unit=unit, camera_pixel=pixel_size, width=width, height=height, frames=frames,
                   extras=tuple(extras), **options)
    if width is None or height is None:
        raise ConfigError(f"{path}: a Picasso file needs the frame width and height (px)")
    from decode_mem.io.picasso import PicassoWriter

    writer = PicassoWriter(path, width=width, height=height, pixel_size=pixel_size, frames=frames,
                           extras=tuple(extras), **options)
    return writer if unit == pixel_size else InCameraPixels(writer, unit, pixel_size)


class InCameraPixels:
    """A writer of camera pixels fed tables in pixels of ``unit`` nm: each table is converted on the way."""

    def __init__(self, writer: Any, unit: float, camera: float) -> None:
        self.writer, self.unit, self.camera = writer, float(unit), float(camera)
        self.path = writer.path

    def __getattr__(self, name: str) -> Any:
        return getattr(self.writer, name)

    def __enter__(self) -> InCameraPixels:
        self.writer.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.writer.__exit__(*exc)

    def write(self, table: EmitterTable, *more: Any) -> None:
        self.writer.write(in_pixels_of(table, self.unit, self.camera), *more)


def in_pixels_of(table: EmitterTable, unit: float, pixel: float) -> EmitterTable:
    """``table`` (pixels of ``unit`` nm) in pixels of ``pixel`` nm (the outer corner stays at -0.5)."""
    if unit == pixel:
        return table
    moved = {c: px_from_table(table[c], unit, pixel) for c in ("x", "y")}
    moved.update({c: table[c].astype(np.float64) * (unit / pixel) for c in ("sigma_x", "sigma_y") if c in table})
    return EmitterTable({**table.columns, **moved})


def write_localizations(table: EmitterTable, path: str | os.PathLike, *, pixel_size: float | None,
                        **meta: Any) -> None:
    """Write a whole table to ``path`` (format by suffix, or ``fmt``), keeping every optional column it has; z only
    where some localization has a z other than 0 (unless ``three_d`` is given)."""
    meta.setdefault("extras", tuple(c for c in OPTIONAL if c in table))
    meta.setdefault("three_d", bool(np.any(table["z"] != 0)))
    with open_writer(path, pixel_size=pixel_size, **meta) as writer:
        writer.write(table)


def localization_meta(path: str | os.PathLike) -> LocalizationMeta:
    """Pixel size, frame size and frame count as recorded: in the file (Picasso, parquet), and where the file does
    not say (a CSV records nothing), in the summary of the ``infer`` run that wrote it (``run_summary``)."""
    fmt = file_format(path)
    _require_file(path)
    own: dict[str, Any] = {}
    if fmt not in ("csv", "rapidstorm"):
        own = _own_meta(path, fmt)
    for key in ("pixel_size", "width", "height", "frames"):  # a file's own numbers: checked, never taken blind
        value = own.get(key)
        if key != "pixel_size" and value is not None and not isinstance(value, bool) and value == 0:
            own[key] = value = None  # 0 frames (an empty table's record, Picasso's 'missing'): not recorded
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float, np.number))
                                  or finite_number(value) is None or value <= 0
                                  or (key != "pixel_size" and (float(value) != int(value) or value > 2**31))):
            raise StackError(f"{path}: the file records {key} {value!r}, not a positive "
                             f"{'number' if key == 'pixel_size' else 'whole number up to 2^31'}")
    if any(own.get(k) is None for k in ("pixel_size", "width", "height", "frames")):
        own = {**_summary_meta(run_summary(path)), **{k: v for k, v in own.items() if v is not None}}
    return LocalizationMeta(
        pixel_size=None if own.get("pixel_size") is None else float(own["pixel_size"]),
        width=None if own.get("width") is None else int(own["width"]),
        height=None if own.get("height") is None else int(own["height"]),
        frames=None if own.get("frames") is None else int(own["frames"]))


def run_summary(path: str | os.PathLike) -> dict[str, Any]:
    """The summary of the ``infer`` run that wrote the localization file ``path``: ``<stem>.json`` beside it, or for
    a file made from one in the same folder (``<stem>_undrift.csv``, ``<stem>_undrift_link.csv``) the one with the
    longest such stem; {} where there is none or it cannot be read. It records the camera (``camera.pixel_size``,
    nm), the movie's ``shape`` (frames, height, width; px) and the model (``model_choice``)."""
    path = Path(path)
    try:
        beside = sorted((p for p in path.parent.glob("*.json")
                         if path.stem == p.stem or path.stem.startswith(f"{p.stem}_")), key=lambda p: -len(p.stem))
    except OSError:
        return {}
    for candidate in beside:
        try:
            summary = json.loads(candidate.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(summary, dict):
            return summary
    return {}


def _summary_meta(summary: dict[str, Any]) -> dict[str, Any]:
    """``LocalizationMeta``'s fields from a run summary (those it records)."""
    camera, shape = summary.get("camera"), summary.get("shape")
    out: dict[str, Any] = {}
    if isinstance(camera, dict) and isinstance(camera.get("pixel_size"), (int, float)) and camera["pixel_size"] > 0:
        out["pixel_size"] = camera["pixel_size"]
    if isinstance(shape, list) and len(shape) == 3 and all(isinstance(v, int) and v > 0 for v in shape):
        out.update(frames=shape[0], height=shape[1], width=shape[2])
    return out


def _own_meta(path: str | os.PathLike, fmt: str) -> dict[str, Any]:
    """What a file of ``fmt`` records itself (``pixel_size``, ``width``, ``height``, ``frames``)."""
    if fmt == "picasso":
        from decode_mem.io.picasso import picasso_meta as read_meta
    elif fmt == "parquet":
        from decode_mem.io.parquet import parquet_meta as read_meta
    elif fmt == "smap":
        from decode_mem.io.smap import smap_meta as read_meta
    elif fmt == "smlm":
        from decode_mem.io.smlm import smlm_meta as read_meta
    else:
        from decode_mem.io.decode_h5 import decode_meta as read_meta
    return read_meta(path)


def working_unit(path: str | os.PathLike, pixel_size: float | None = None) -> float:
    """The pixel (nm) a job reads ``path``'s localizations in: 1 nm for a file in nm (its nm kept as they are),
    the file's own camera pixel for one in pixels, else ``pixel_size`` (ConfigError naming the file where neither
    is known). A DECODE file with pixels that are not square is read in nm."""
    fmt = file_format(path)
    if fmt in IN_NM:
        return NM_UNIT
    own = localization_meta(path).pixel_size
    if own is not None:
        return float(own)
    if fmt == "decode":
        from decode_mem.io.decode_h5 import decode_meta

        if decode_meta(path)["camera_xy"] is not None or decode_meta(path)["xy_unit"] == "nm":
            return NM_UNIT
    if pixel_size is not None:
        return float(pixel_size)
    raise ConfigError(f"{path}: the file records no pixel size; give --pixel_size (nm)")


def has_z(path: str | os.PathLike) -> bool:
    """Whether the file holds a z column (where it does not, its tables' z is 0): from its header, not its rows."""
    fmt = file_format(path)
    _require_file(path)
    if fmt == "csv":
        return "z [nm]" in read_header(path)
    if fmt == "parquet":
        from decode_mem.io.parquet import parquet_columns

        return "z [nm]" in parquet_columns(path)
    if fmt == "picasso":
        from decode_mem.io.picasso import picasso_columns

        return "z" in picasso_columns(path)
    if fmt == "smap":
        from decode_mem.io.smap import smap_fields

        return "znm" in smap_fields(path)
    if fmt == "smlm":
        from decode_mem.io.smlm import smlm_has_z

        return smlm_has_z(path)
    if fmt == "rapidstorm":
        from decode_mem.io.rapidstorm import header_fields

        return any(i == "Position-2-0" for i, _ in header_fields(path))
    return True  # DECODE: xyz always


def iter_localizations(path: str | os.PathLike, *, pixel_size: float | None = None,
                       chunk_rows: int = CHUNK_ROWS) -> Iterator[EmitterTable]:
    """Yield the file's localizations as tables of bounded size (about ``chunk_rows`` rows), in pixels of
    ``pixel_size`` nm, frames 0-based.

    ``pixel_size`` None: the camera pixel the file (or, for a CSV, its run's summary) records, else the file's own
    pixels (Picasso, DECODE) or 1 nm (a file in nm: ``NM_UNIT``; x = nm - 0.5). Files in pixels are converted to
    pixels of ``pixel_size`` where it differs (the outer corner, -0.5 px, stays fixed).

    Rows with a non-finite or out-of-range frame, x, y, z, photon count or background are left out, with one
    warning that counts them when the file has been read (``table.RowCheck``: which values, per column).
    """
    fmt = file_format(path)
    _require_file(path)
    meta = localization_meta(path)
    # the camera pixel in the tables' pixels: known where the tables' pixel is the one asked for and the file's known
    pixel = meta.pixel_size / float(pixel_size) if pixel_size and meta.pixel_size else None
    check = RowCheck(str(path), pixel=pixel, width=meta.width, height=meta.height, frames=meta.frames)
    for table in _tables(path, fmt, pixel_size, chunk_rows, meta):
        yield check(table)
    if check.warning():
        warnings.warn(check.warning(), stacklevel=2)


def _tables(path: str | os.PathLike, fmt: str, pixel_size: float | None, chunk_rows: int,
            meta: LocalizationMeta) -> Iterator[EmitterTable]:
    """The file's tables as its format's reader gives them (``iter_localizations``; ``meta``: what it records)."""
    if fmt == "picasso":
        from decode_mem.io.picasso import iter_picasso

        own = meta.pixel_size
        for table in iter_picasso(path, chunk_rows):
            yield table if pixel_size is None or own is None else in_pixels_of(table, own, float(pixel_size))
    elif fmt == "parquet":
        from decode_mem.io.parquet import iter_parquet

        yield from iter_parquet(path, pixel_size, chunk_rows)
    elif fmt == "csv":
        unit = pixel_size or meta.pixel_size or NM_UNIT
        yield from iter_thunderstorm(path, float(unit), chunk_rows)
    else:
        if fmt == "smap":
            from decode_mem.io.smap import iter_smap as read
        elif fmt == "smlm":
            from decode_mem.io.smlm import iter_smlm as read
        elif fmt == "decode":
            from decode_mem.io.decode_h5 import iter_decode as read
        else:
            from decode_mem.io.rapidstorm import iter_rapidstorm as read
        yield from read(path, None if pixel_size is None else float(pixel_size), chunk_rows)


def read_localizations(path: str | os.PathLike, *, pixel_size: float | None = None) -> EmitterTable:
    """Read a whole localization file (format by suffix and content) into pixel units, frames 0-based."""
    return EmitterTable.concat(iter_localizations(path, pixel_size=pixel_size))


def convert_file(source: str | os.PathLike, target: str | os.PathLike, *, pixel_size: float | None = None,
                 fmt: str | None = None, chunk_rows: int = CHUNK_ROWS, **options: Any) -> int:
    """Copy the localizations of ``source`` into ``target`` (``fmt``, default by suffix), streamed: memory is a
    few chunks whatever the length. The pixel size, frame size and frames go along where both formats record them;
    ``pixel_size`` (nm) is the camera pixel where ``source`` records none (needed for Picasso and DECODE targets
    of a file in nm). Returns the number of localizations."""
    meta = localization_meta(source)
    camera = meta.pixel_size or pixel_size
    unit = working_unit(source, camera)
    three_d = has_z(source)
    n = 0
    tables = iter_localizations(source, pixel_size=unit, chunk_rows=chunk_rows)
    first = next(tables)
    extras = tuple(c for c in OPTIONAL if c in first)
    options.setdefault("three_d", three_d)
    if Path(target).resolve() == Path(source).resolve():
        raise ConfigError(f"{target}: the converted file would overwrite its source")
    with open_writer(target, pixel_size=camera, unit=unit, fmt=fmt, width=meta.width, height=meta.height,
                     frames=meta.frames, extras=extras, **options) as writer:
        for table in _chain(first, tables):
            writer.write(table)
            n += len(table)
    return n


def _chain(first: EmitterTable, rest: Iterator[EmitterTable]) -> Iterator[EmitterTable]:
    yield first
    yield from rest


def _require_file(path: str | os.PathLike) -> None:
    if not Path(path).is_file():
        raise StackError(f"{path}: no such localization file")
