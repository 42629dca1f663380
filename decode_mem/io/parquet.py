"""Parquet localizations: the ThunderSTORM CSV's columns and units in a columnar, compressed file.

A parquet file holds exactly what our CSV holds (DESIGN.md §3): columns ``id``, ``frame`` (int64,
**1-based**), ``x [nm]``, ``y [nm]`` measured from the image's outer corner (pixel centre ``j`` is at
``(j + 0.5) * pixel_size``), ``z [nm]`` (3-D only), ``intensity [photon]``, ``offset [photon]``, ``uncertainty [nm]``,
then the optional extras (``prob``, ``sigma_x [nm]``, ...), all float64. So a parquet file and a CSV
written from the same table read back to the same table, and tools that read one read the other.
The file's key-value metadata ``decode_mem`` (JSON) records ``pixel_size`` (nm) and, when known,
``width``, ``height`` (px) and ``frames``, so it can be read back to pixels without being told.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from decode_mem.errors import ConfigError, StackError, exception_line
from decode_mem.io.arrow_numpy import arrow_column, column_numpy
from decode_mem.io.atomic import atomic_output
from decode_mem.io.provenance import generated_by
from decode_mem.io.table import EmitterTable
from decode_mem.io.thunderstorm import EXTRA_COLUMNS, column_headers, table_from_thunderstorm, thunderstorm_columns
from decode_mem.io.units import NM_UNIT

META_KEY = "decode_mem"
ROW_GROUP_ROWS = 65_536




class ParquetWriter:
    """Streaming parquet writer: ``write(table)`` appends; the file appears under its name on close.

    Rows are buffered and written in row groups of exactly ``row_group_rows`` (the last one shorter), so
    memory stays bounded and row groups are not tiny. An exception inside the ``with`` block removes the partial file.
    ``width``/``height``/``frames`` go into the file's metadata when given (``frames`` defaults to the
    largest frame written + 1).
    """

    def __init__(self, path: str | os.PathLike, pixel_size: float, extras: tuple[str, ...] = (), *,
                 width: int | None = None, height: int | None = None, frames: int | None = None,
                 row_group_rows: int = ROW_GROUP_ROWS, compression: str = "zstd", three_d: bool = True) -> None:
        self.path = Path(path)
        self.pixel_size = float(pixel_size)
        self.extras = tuple(extras)
        self.three_d = bool(three_d)
        unknown = [e for e in self.extras if e not in EXTRA_COLUMNS]
        if unknown:
            raise ValueError(f"ParquetWriter: unknown extra columns {unknown}")
        if not self.pixel_size > 0:
            raise ConfigError(f"ParquetWriter: pixel_size must be > 0 nm, got {pixel_size}")
        self.meta: dict[str, Any] = {"pixel_size": self.pixel_size, "width": width, "height": height,
                                     "frames": frames, "generated_by": generated_by()}
        self.row_group_rows = max(1, int(row_group_rows))
        self.compression = compression
        headers = column_headers(self.extras, self.three_d)
        self.schema = pa.schema([(h, pa.int64() if h in ("id", "frame") else pa.float64()) for h in headers])
        self._atomic = ExitStack()
        self._writer: pq.ParquetWriter | None = None
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self._next_id = 1
        self._max_frame = -1

    def __enter__(self) -> ParquetWriter:
        tmp = self._atomic.enter_context(atomic_output(self.path))
        # no dictionary pages: measured values rarely repeat, and trying them cost half the write time
        self._writer = pq.ParquetWriter(tmp, self.schema, compression=self.compression, use_dictionary=False,
                                        column_encoding=column_encodings(self.schema))
        return self

    def write(self, table: EmitterTable) -> None:
        self._append(table, {})

    def _append(self, table: EmitterTable, more: Mapping[str, np.ndarray]) -> None:
        """Buffer ``table``'s columns and the columns ``more`` (names of the schema's own beyond the format's) as
        one arrow table over the numpy arrays (no copy where the dtype is the schema's, so ``more``'s arrays must
        not change until written); whole row groups are written as they fill."""
        n = len(table)
        if n == 0:
            return
        cols = thunderstorm_columns(table, self.pixel_size, self.extras, self._next_id, three_d=self.three_d)
        cols.update(more)
        arrays = [arrow_column(np.asarray(cols[f.name]), f.type) for f in self.schema]
        self._buffer.append(pa.Table.from_arrays(arrays, schema=self.schema))
        self._next_id += n
        self._buffered += n
        self._max_frame = max(self._max_frame, int(table["frame"].max()))
        if self._buffered >= self.row_group_rows:
            self._flush(whole_groups=True)

    def _flush(self, whole_groups: bool = False) -> None:
        """Write the buffer as row groups of ``row_group_rows``; with ``whole_groups`` keep the rest buffered.
        Arrow joins and slices the buffered tables without copying their columns (the rest keeps a view of the last
        tables, at most one row group behind)."""
        if not self._buffer:
            return
        buffered = pa.concat_tables(self._buffer)
        end = self._buffered - self._buffered % self.row_group_rows if whole_groups else self._buffered
        if end:
            self._writer.write_table(buffered.slice(0, end), row_group_size=self.row_group_rows)
        rest = self._buffered - end
        self._buffer = [buffered.slice(end)] if rest else []
        self._buffered = rest

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if exc_type is None:
                self._flush()
                if self.meta["frames"] is None:
                    self.meta["frames"] = self._max_frame + 1
                self._writer.add_key_value_metadata({META_KEY: json.dumps(self.meta)})
        except BaseException as e:
            self._writer.close()
            self._atomic.__exit__(type(e), e, e.__traceback__)
            raise
        self._writer.close()
        self._buffer = []
        self._atomic.__exit__(exc_type, exc, tb)  # renamed when complete, removed on an error


def column_encodings(schema: pa.Schema) -> dict[str, str]:
    """Each column's parquet encoding: byte stream split for the floats (their bytes of one rank together: zstd
    compresses them better and faster), delta for the whole numbers (ids, frames, groups: mostly small steps).
    On a linked 10^7-row table these wrote in 0.62 of the CPU time of the plain encoding and 0.88 of its size
    (bench_postprocess's stream table; a measurement in the commit that chose them). Both are parquet format 2
    encodings that pyarrow, polars, DuckDB and Spark read."""
    return {f.name: "DELTA_BINARY_PACKED" if pa.types.is_integer(f.type) else "BYTE_STREAM_SPLIT" for f in schema}


def write_parquet(table: EmitterTable, path: str | os.PathLike, pixel_size: float, **kwargs: Any) -> None:
    """Write a whole table atomically (all optional columns that the table has)."""
    extras = tuple(c for c in EXTRA_COLUMNS if c in table)
    with ParquetWriter(path, pixel_size, extras, **kwargs) as writer:
        writer.write(table)


def _open(path: str | os.PathLike) -> pq.ParquetFile:
    path = Path(path)
    if not path.is_file():
        raise StackError(f"{path}: no such localization file")
    try:
        # no pre-buffering: pyarrow 26 would otherwise hold read-ahead column chunks beyond the batch in hand
        # (iterating a 10^7-row file peaked at 624 MiB RssAnon with it, 300 MiB without, and was no faster)
        return pq.ParquetFile(path, pre_buffer=False)
    except (pa.ArrowException, OSError) as e:
        raise StackError(f"{path}: not a readable parquet file: {exception_line(e, with_type=False)}") from e


def parquet_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The ``decode_mem`` metadata of a parquet file (``pixel_size``, ``width``, ``height``, ``frames``)."""
    try:
        kv = _open(path).metadata.metadata or {}
        raw = kv.get(META_KEY.encode())
        meta = json.loads(raw) if raw else {}
    except (ValueError, UnicodeDecodeError) as e:  # metadata bytes damaged
        raise StackError(f"{path}: its decode_mem metadata cannot be read ({type(e).__name__})") from e
    if not isinstance(meta, dict):
        raise StackError(f"{path}: its decode_mem metadata are not a mapping")
    return meta


def parquet_columns(path: str | os.PathLike) -> list[str]:
    """The file's column names."""
    return list(_open(path).schema_arrow.names)


def iter_parquet(path: str | os.PathLike, pixel_size: float | None = None,
                 batch_rows: int = 1 << 20) -> Iterator[EmitterTable]:
    """Yield the file's rows as tables of at most ``batch_rows`` (memory bounded by the batch).

    ``pixel_size`` (nm) defaults to the one recorded in the file; a file without one is read in 1 nm pixels.
    """
    pf = _open(path)
    names = pf.schema_arrow.names
    if "frame" not in names or "x [nm]" not in names or "y [nm]" not in names:
        raise StackError(f"{path}: not a localization parquet (needs 'frame', 'x [nm]', 'y [nm]' columns)")
    if pixel_size is None:  # the camera's, where the file records one; else its nm as they are
        pixel_size = parquet_meta(path).get("pixel_size") or NM_UNIT
    known = [h for h in names if h != "id"]
    empty = True
    batches = pf.iter_batches(batch_size=batch_rows, columns=known)
    while True:
        try:
            batch = next(batches, None)
        except (pa.ArrowException, OSError, ValueError) as e:  # a damaged page: pyarrow's decoder says so
            raise StackError(f"{path}: its rows cannot be read ({exception_line(e)})") from e
        if batch is None:
            break
        empty = False
        cols = {h: column_numpy(batch.column(h)) for h in known}
        yield table_from_thunderstorm(cols, pixel_size)
    if empty:
        yield table_from_thunderstorm({h: np.zeros(0) for h in known}, pixel_size)


def read_parquet(path: str | os.PathLike, pixel_size: float | None = None) -> EmitterTable:
    """Read a whole parquet localization file back into pixel units, frames 0-based."""
    return EmitterTable.concat(iter_parquet(path, pixel_size))
