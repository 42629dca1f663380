"""One entry point for localization files, chosen by suffix: ``.csv`` (ThunderSTORM), ``.hdf5``/``.h5``
(Picasso, with its ``.yaml``), ``.parquet``/``.pq`` (the CSV's columns in parquet).

In memory everything is an :class:`EmitterTable` in pixels (centres at integer coordinates), frames
0-based. CSV and parquet store nm from the image corner, so reading them back needs the camera pixel
size: given, or (parquet) recorded in the file. Picasso files carry it in their metadata. A CSV records no
acquisition: the summary of the ``infer`` run that wrote it (``<stem>.json`` beside it, ``run_summary``) does, and
``localization_meta`` reads it there, for every job.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from decode_mem.errors import ConfigError, StackError
from decode_mem.io.table import OPTIONAL, EmitterTable
from decode_mem.io.thunderstorm import EXTRA_COLUMNS, ThunderstormWriter, table_from_thunderstorm

if TYPE_CHECKING:  # pyarrow (parquet, CSV reading) and h5py (Picasso) are imported where a format needs them
    from decode_mem.io.parquet import ParquetWriter
    from decode_mem.io.picasso import PicassoWriter

FORMATS = {".csv": "csv", ".hdf5": "picasso", ".h5": "picasso", ".parquet": "parquet", ".pq": "parquet"}
CHUNK_ROWS = 1 << 20


@dataclass(frozen=True)
class LocalizationMeta:
    """What a file says about its acquisition; ``None`` where it does not say."""

    pixel_size: float | None = None  # camera pixel, nm
    width: int | None = None  # px
    height: int | None = None  # px
    frames: int | None = None


def file_format(path: str | os.PathLike) -> str:
    """``'csv'``, ``'picasso'`` or ``'parquet'`` from the suffix; ConfigError for anything else."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ConfigError(f"{path}: unknown localization file type {suffix!r}; use one of {', '.join(FORMATS)}")
    return FORMATS[suffix]


def open_writer(path: str | os.PathLike, *, pixel_size: float, width: int | None = None, height: int | None = None,
                frames: int | None = None, extras: tuple[str, ...] = (), **options: Any
                ) -> ThunderstormWriter | PicassoWriter | ParquetWriter:
    """A streaming, atomic writer for ``path`` (a context manager with ``write(table)``).

    ``extras`` are optional table columns to keep (``prob``, ``sigma_x``, ...). ``width``/``height``
    (px) are required for Picasso and recorded in parquet; ``options`` go to the format's writer
    (every format: ``three_d``, False leaves z out of the file; Picasso: ``psf_sigma``, ``source``, ``info``;
    parquet: ``row_group_rows``).
    """
    fmt = file_format(path)
    unknown = [e for e in extras if e not in OPTIONAL]
    if unknown:
        raise ConfigError(f"{path}: unknown extra columns {unknown}; choose from {', '.join(OPTIONAL)}")
    if fmt == "csv":
        three_d = options.pop("three_d", True)
        if options:
            raise ConfigError(f"{path}: options {sorted(options)} do not apply to CSV")
        return ThunderstormWriter(path, pixel_size, tuple(extras), three_d)
    if fmt == "parquet":
        from decode_mem.io.parquet import ParquetWriter

        return ParquetWriter(path, pixel_size, tuple(extras), width=width, height=height, frames=frames, **options)
    if width is None or height is None:
        raise ConfigError(f"{path}: a Picasso file needs the frame width and height (px)")
    from decode_mem.io.picasso import PicassoWriter

    return PicassoWriter(path, width=width, height=height, pixel_size=pixel_size, frames=frames,
                         extras=tuple(extras), **options)


def write_localizations(table: EmitterTable, path: str | os.PathLike, *, pixel_size: float,
                        **meta: Any) -> None:
    """Write a whole table to ``path`` (format by suffix), keeping every optional column it has; z only
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
    if fmt != "csv":
        if fmt == "picasso":
            from decode_mem.io.picasso import picasso_meta as read_meta
        else:
            from decode_mem.io.parquet import parquet_meta as read_meta
        own = read_meta(path)
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


def iter_localizations(path: str | os.PathLike, *, pixel_size: float | None = None,
                       chunk_rows: int = CHUNK_ROWS) -> Iterator[EmitterTable]:
    """Yield the file's localizations as tables of bounded size (about ``chunk_rows`` rows).

    ``pixel_size`` (nm) converts CSV/parquet nm back to pixels; parquet falls back to the value in
    the file; Picasso files are in their own pixels, converted to pixels of ``pixel_size`` when it differs
    (the outer corner, -0.5 px, stays fixed).
    """
    fmt = file_format(path)
    _require_file(path)
    if fmt == "picasso":
        from decode_mem.io.picasso import iter_picasso

        own = localization_meta(path).pixel_size
        scale = 1.0 if pixel_size is None or own is None else own / float(pixel_size)
        for table in iter_picasso(path, chunk_rows):
            yield table if scale == 1.0 else _rescaled(table, scale)
    elif fmt == "parquet":
        from decode_mem.io.parquet import iter_parquet

        yield from iter_parquet(path, pixel_size, chunk_rows)
    else:
        if pixel_size is None:
            raise ConfigError(f"{path}: reading a CSV needs the camera pixel size (nm)")
        yield from _iter_csv(Path(path), float(pixel_size), chunk_rows)


def read_localizations(path: str | os.PathLike, *, pixel_size: float | None = None) -> EmitterTable:
    """Read a whole localization file (format by suffix) into pixel units, frames 0-based."""
    return EmitterTable.concat(iter_localizations(path, pixel_size=pixel_size))


def _rescaled(table: EmitterTable, scale: float) -> EmitterTable:
    """Pixel coordinates in pixels ``scale`` times smaller (centres at integers: the corner stays at -0.5)."""
    moved = {c: (table[c] + 0.5) * scale - 0.5 for c in ("x", "y")}
    moved.update({c: table[c] * scale for c in ("sigma_x", "sigma_y") if c in table})
    return EmitterTable({**table.columns, **moved})


def _require_file(path: str | os.PathLike) -> None:
    if not Path(path).is_file():
        raise StackError(f"{path}: no such localization file")


def _iter_csv(path: Path, pixel_size: float, chunk_rows: int) -> Iterator[EmitterTable]:
    """ThunderSTORM CSV (ours or ThunderSTORM's own) in blocks, with pyarrow's streaming reader."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    with open(path, newline="") as fh:
        header = next(csv.reader(fh), None)
    if not header or "x [nm]" not in header or "y [nm]" not in header or "frame" not in header:
        raise StackError(f"{path}: not a ThunderSTORM CSV (needs 'frame', 'x [nm]', 'y [nm]' columns)")
    known = ["frame", "x [nm]", "y [nm]", "z [nm]", "intensity [photon]", "offset [photon]"]
    known += [h for h, _ in EXTRA_COLUMNS.values()]
    used = [h for h in known if h in header]
    types = {h: pa.float64() for h in used}  # ThunderSTORM itself writes frames as "1.0"
    block_size = max(1 << 16, min(chunk_rows * 80, 1 << 28))  # ~80 bytes per row
    try:
        reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=block_size),
                                convert_options=pacsv.ConvertOptions(column_types=types, include_columns=used))
        empty = True
        for batch in reader:
            empty = False
            yield table_from_thunderstorm(
                {h: batch.column(h).to_numpy(zero_copy_only=False) for h in used}, pixel_size)
    except pa.ArrowInvalid as e:
        raise StackError(f"{path}: cannot parse as a ThunderSTORM CSV: {e}") from e
    if empty:
        yield table_from_thunderstorm({h: np.zeros(0) for h in used}, pixel_size)
