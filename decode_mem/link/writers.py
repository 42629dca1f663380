"""The format writers of ``decode_mem.io`` with whole-number columns of their own added after theirs (a
molecule's ``len``, ``n``, ``group``; a localization's ``group``), so that a linked file is what its clients
expect: Picasso's ``_link.hdf5`` columns (``len``, ``n``, ``photon_rate``, with ``lpx``/``lpy`` the combined
precision), the same names as extra columns of a ThunderSTORM CSV, a parquet or ShareLoc file and fields of a SMAP
file; in a DECODE file the ``group`` is the emitter's ``id`` and every column is in ``per_localization``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from decode_mem.io.csv_text import csv_lines
from decode_mem.io.localizations import open_writer
from decode_mem.io.parquet import ParquetWriter
from decode_mem.io.picasso import PicassoWriter
from decode_mem.io.table import EmitterTable
from decode_mem.io.thunderstorm import ThunderstormWriter, thunderstorm_columns

PICASSO_TYPES = {"len": "<u4", "n": "<u4", "group": "<i4", "photon_rate": "<f4"}


class _CsvWithColumns(ThunderstormWriter):
    def __init__(self, *args: Any, more: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.more = more
        self._headers = [*self._headers, *more]
        self.formats = [*self.formats, *("%.4f" if m == "photon_rate" else "%d" for m in more)]

    def write(self, table: EmitterTable, more: Mapping[str, np.ndarray]) -> None:  # type: ignore[override]
        if len(table) == 0:
            return
        cols = thunderstorm_columns(table, self.pixel_size, self.extras, first_id=self._next_id,
                                    three_d=self.three_d)
        values = [*cols.values(), *(np.asarray(more[m]) for m in self.more)]
        for text in csv_lines(values, self.formats):
            self._fh.write(text)
        self._next_id += len(table)


class _ParquetWithColumns(ParquetWriter):
    def __init__(self, *args: Any, more: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.more = more
        for m in more:
            self.schema = self.schema.append(pa.field(m, pa.float64() if m == "photon_rate" else pa.int64()))

    def write(self, table: EmitterTable, more: Mapping[str, np.ndarray]) -> None:  # type: ignore[override]
        self._append(table, {m: more[m] for m in self.more})


class _PicassoWithColumns(PicassoWriter):
    def __init__(self, *args: Any, more: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.more = more
        self.dtype = np.dtype(self.dtype.descr + [(m, PICASSO_TYPES[m]) for m in more])
        self._more: Mapping[str, np.ndarray] = {}

    def records(self, table: EmitterTable) -> np.ndarray:
        rec = super().records(table)
        for m in self.more:
            rec[m] = self._more[m]
        return rec

    def write(self, table: EmitterTable, more: Mapping[str, np.ndarray]) -> None:  # type: ignore[override]
        self._more = more
        super().write(table)


def open_writer_with_columns(path: str | os.PathLike, more: tuple[str, ...], *, fmt: str, **options: Any) -> Any:
    """``open_writer(path, fmt=fmt, **options)`` whose ``write(table, more)`` also writes the columns ``more`` (names
    from ``PICASSO_TYPES``) from the mapping ``more``. ``options``: ``pixel_size`` (the camera's, None where not
    known), ``unit`` (the tables' pixel, default ``pixel_size``), ``extras`` and the format's own."""
    if fmt in ("smap", "smlm", "decode"):
        return open_writer(path, fmt=fmt, more=more, **options)
    unit = options.pop("unit", None) or options["pixel_size"]
    pixel_size = options.pop("pixel_size")
    extras = tuple(options.pop("extras", ()))
    if fmt == "csv":
        return _CsvWithColumns(path, unit, extras, options.get("three_d", True), more=more)
    if fmt == "parquet":
        writer = _ParquetWithColumns(path, unit, extras, more=more, **options)
        writer.meta["pixel_size"] = pixel_size  # the camera's, as open_writer records it
        return writer
    if unit != pixel_size:
        raise ValueError("open_writer_with_columns: a Picasso file is written from tables in its own pixels")
    return _PicassoWithColumns(path, pixel_size=pixel_size, extras=extras, more=more, **options)
