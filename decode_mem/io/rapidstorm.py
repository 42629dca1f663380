"""rapidSTORM localization tables (``.txt``): one header line, ``# <localizations ...>`` with a ``<field>`` per
column (``identifier``, ``semantic``, ``unit``), then the rows, numbers separated by spaces. Read only.

Columns read: ``Position-0-0``/``-1-0``/``-2-0`` (x, y, z), their ``-uncertainty`` (σ), ``ImageNumber-0-0``
(the frame, 0-based), ``Amplitude-0-0`` (photons) and ``LocalBackground-0-0`` (background); the others (PSF width,
fit residues, ...) are left out. Positions are in the field's unit (nanometer, micrometer, meter); the amplitude and
background are rapidSTORM's "A/D count": rapidSTORM records no camera gain, so they are kept as they are, not
photons. A rapidSTORM table records no pixel size: it is read in nm.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from decode_mem.errors import StackError, exception_line
from decode_mem.io.table import EmitterTable
from decode_mem.io.thunderstorm import csv_block, joined_batches
from decode_mem.io.units import NM_UNIT, table_from_nm

MAGIC = "# <localizations"
LENGTH_UNITS = {"nanometer": 1.0, "nm": 1.0, "micrometer": 1e3, "um": 1e3, "meter": 1e9, "m": 1e9,
                "picometer": 1e-3}
COLUMNS = {"Position-0-0": "x", "Position-1-0": "y", "Position-2-0": "z", "ImageNumber-0-0": "frame",
           "Amplitude-0-0": "photons", "LocalBackground-0-0": "bg", "Position-0-0-uncertainty": "sigma_x",
           "Position-1-0-uncertainty": "sigma_y", "Position-2-0-uncertainty": "sigma_z"}
LENGTHS = ("x", "y", "z", "sigma_x", "sigma_y", "sigma_z")
MAX_HEADER = 1 << 20


def is_rapidstorm(path: str | os.PathLike) -> bool:
    """Whether ``path`` starts with rapidSTORM's header."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(MAGIC)) == MAGIC.encode()
    except OSError:
        return False


def header_fields(path: str | os.PathLike) -> list[tuple[str, str]]:
    """(identifier, unit) of every column, in order (StackError for a file that is not a rapidSTORM table)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            line = fh.readline(MAX_HEADER).decode("utf-8", "replace").strip()
    except OSError as e:
        raise StackError(f"{path}: cannot be read: {exception_line(e, with_type=False)}") from e
    if not line.startswith(MAGIC):
        raise StackError(f"{path}: not a rapidSTORM table (no '# <localizations' header line)")
    try:
        root = ET.fromstring(line[1:].strip())
    except ET.ParseError as e:
        raise StackError(f"{path}: rapidSTORM header is not valid XML: {exception_line(e, with_type=False)}") from e
    if root.find("localizations") is not None:
        raise StackError(f"{path}: a rapidSTORM track file (localizations within localizations); decode_mem reads "
                         f"rapidSTORM's localization tables")
    fields = [(f.get("identifier", ""), f.get("unit", "")) for f in root.findall("field")]
    if not fields:
        raise StackError(f"{path}: rapidSTORM header names no columns")
    return fields


def iter_rapidstorm(path: str | os.PathLike, unit: float | None = None, chunk_rows: int = 1 << 20
                    ) -> Iterator[EmitterTable]:
    """Yield the table as tables of about ``chunk_rows`` rows in pixels of ``unit`` nm (None: 1 nm), frames
    0-based."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    path = Path(path)
    fields = header_fields(path)
    ids = [i for i, _ in fields]
    where = {COLUMNS[i]: i for i in ids if i in COLUMNS}
    missing = [c for c in ("x", "y") if c not in where]
    if missing:
        raise StackError(f"{path}: the rapidSTORM header has no {' or '.join(missing)} position")
    units = dict(fields)
    scale = {}
    for c in LENGTHS:
        if c in where:
            u = units[where[c]].strip().lower()
            if u not in LENGTH_UNITS:
                raise StackError(f"{path}: rapidSTORM column {where[c]} has the unit {u!r}, not a length decode_mem "
                                 f"knows")
            scale[c] = LENGTH_UNITS[u]
    unit = float(unit) if unit else NM_UNIT
    names = [f"c{k}" for k in range(len(ids))]
    used = [names[ids.index(where[c])] for c in where]
    try:
        reader = pacsv.open_csv(
            path, read_options=pacsv.ReadOptions(skip_rows=1, column_names=names, block_size=csv_block(chunk_rows)),
            parse_options=pacsv.ParseOptions(delimiter=" ", ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(column_types={n: pa.float64() for n in used}, include_columns=used))
        empty = True
        for joined in joined_batches(reader, used, chunk_rows):
            empty = False
            yield _table({c: joined[names[ids.index(where[c])]] for c in where}, scale, unit, path)
    except (pa.ArrowException, OSError, ValueError) as e:
        if isinstance(e, StackError):
            raise
        # pyarrow's message quotes rows over several lines: exception_line keeps its first
        raise StackError(f"{path}: cannot parse as a rapidSTORM table: {exception_line(e, with_type=False)}") \
            from e
    if empty:
        yield EmitterTable.empty()


def _table(cols: dict[str, np.ndarray], scale: dict[str, float], unit: float, path: Path) -> EmitterTable:
    n = len(cols["x"])
    frame = cols.get("frame", np.zeros(n))
    if not np.all(np.isfinite(frame)):
        raise StackError(f"{path}: rapidSTORM frame numbers that are not numbers")
    columns = {"frame": frame.astype(np.int64), "x": table_from_nm(cols["x"] * scale["x"], unit, None),
               "y": table_from_nm(cols["y"] * scale["y"], unit, None),
               "z": cols["z"] * scale["z"] if "z" in cols else np.zeros(n),
               "photons": cols.get("photons", np.zeros(n)), "bg": cols.get("bg", np.zeros(n))}
    if "sigma_x" in cols and "sigma_y" in cols:
        columns["sigma_x"] = cols["sigma_x"] * scale["sigma_x"] / unit
        columns["sigma_y"] = cols["sigma_y"] * scale["sigma_y"] / unit
    if "sigma_z" in cols:
        columns["sigma_z"] = cols["sigma_z"] * scale["sigma_z"]
    return EmitterTable(columns)


def read_rapidstorm(path: str | os.PathLike, unit: float | None = None) -> EmitterTable:
    return EmitterTable.concat(iter_rapidstorm(path, unit))
