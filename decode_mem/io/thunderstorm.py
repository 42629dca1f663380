"""ThunderSTORM CSV: the text format for localizations and ground truth (DESIGN.md §3).

Columns ``id,frame,x [nm],y [nm],z [nm],intensity [photon],offset [photon],uncertainty [nm]`` then
optional extras; frames 1-based; x/y from the image's outer corner, so pixel centre ``j`` is at
``(j + 0.5) * pixel_size`` nm. 2-D results leave out ``z [nm]`` (``three_d=False``): an all-zero z column
makes tools such as locan read the data as 3-D; a file without it reads back with z = 0.

``uncertainty [nm]`` is ThunderSTORM 1.3's name for the lateral precision (what it reads and writes); later
ThunderSTORM builds write ``uncertainty_xy [nm]`` and, for 3-D, ``uncertainty_z [nm]``. The reader takes either as
σx = σy (and σz) where a file has no ``sigma_x [nm]``/``sigma_y [nm]`` (``sigma_z [nm]``) columns of decode_mem's;
a column of NaN only (decode_mem's CSV of a table without σ) is left out. Headers are read as csv quotes them,
also a header line saved as one quoted field (``"id,""frame"",..."``, as a spreadsheet re-saves it).
"""

from __future__ import annotations

import csv
import os
import warnings
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType

import numpy as np

from decode_mem.errors import StackError, Stopped, exception_line
from decode_mem.io.atomic import atomic_output
from decode_mem.io.csv_text import csv_lines
from decode_mem.io.table import EmitterTable

BASE_COLUMNS = ("id", "frame", "x [nm]", "y [nm]", "z [nm]", "intensity [photon]", "offset [photon]",
                "uncertainty [nm]")
EXTRA_COLUMNS = {  # table column -> (csv header, multiply by pixel size?)
    "prob": ("prob", False),
    "sigma_x": ("sigma_x [nm]", True),
    "sigma_y": ("sigma_y [nm]", True),
    "sigma_z": ("sigma_z [nm]", False),
    "sigma_photons": ("sigma_intensity [photon]", False),
    "channel": ("channel", False),  # two-colour data (io.table): 1, 2 (0: both)
    "dye": ("dye", False),  # 1, 2, ... (0: unassigned)
    "ratio": ("ratio", False),  # the share of the photons in channel 2
}
COUNT_EXTRAS = ("prob", "channel", "dye", "ratio")  # written with 6 significant digits (an integer as one)


def column_headers(extras: tuple[str, ...] = (), three_d: bool = True) -> list[str]:
    """The file's headers in order: the base columns (without ``z [nm]`` for 2-D), then the extras'."""
    base = [h for h in BASE_COLUMNS if three_d or h != "z [nm]"]
    return base + [EXTRA_COLUMNS[e][0] for e in extras]


def thunderstorm_columns(table: EmitterTable, pixel_size: float, extras: tuple[str, ...] = (),
                         first_id: int = 1, three_d: bool = True) -> dict[str, np.ndarray]:
    """The ThunderSTORM columns (header -> values) of ``table``: 1-based frames, nm from the corner.

    Same numbers as ``ThunderstormWriter`` writes (before its text formatting); extras missing from
    ``table`` are NaN; no ``z [nm]`` when ``three_d`` is False.
    """
    n = len(table)
    px = float(pixel_size)
    if "sigma_x" in table and "sigma_y" in table:
        unc = np.sqrt((table["sigma_x"].astype(np.float64) ** 2 + table["sigma_y"].astype(np.float64) ** 2) / 2) * px
    else:
        unc = np.full(n, np.nan)
    values = [
        np.arange(first_id, first_id + n, dtype=np.int64),
        table["frame"].astype(np.int64) + 1,
        (table["x"].astype(np.float64) + 0.5) * px,
        (table["y"].astype(np.float64) + 0.5) * px,
        table["z"].astype(np.float64),
        table["photons"].astype(np.float64),
        table["bg"].astype(np.float64),
        unc,
    ]
    cols = dict(zip(BASE_COLUMNS, values, strict=True))
    if not three_d:
        del cols["z [nm]"]
    for extra in extras:
        header, in_px = EXTRA_COLUMNS[extra]
        scale = px if in_px else 1.0
        cols[header] = table[extra].astype(np.float64) * scale if extra in table else np.full(n, np.nan)
    return cols


def table_from_thunderstorm(cols: Mapping[str, np.ndarray], pixel_size: float) -> EmitterTable:
    """Inverse of :func:`thunderstorm_columns`: pixels, 0-based frames; unknown columns are ignored."""
    n = len(cols["frame"])
    px = float(pixel_size)
    columns = {
        "frame": np.asarray(cols["frame"]).astype(np.int64) - 1,
        "x": np.asarray(cols["x [nm]"], np.float64) / px - 0.5,
        "y": np.asarray(cols["y [nm]"], np.float64) / px - 0.5,
        "z": cols.get("z [nm]", np.zeros(n)),
        "photons": cols.get("intensity [photon]", np.zeros(n)),
        "bg": cols.get("offset [photon]", np.zeros(n)),
    }
    for name, (header, in_px) in EXTRA_COLUMNS.items():
        if header in cols:
            columns[name] = np.asarray(cols[header], np.float64) / px if in_px else cols[header]
    return EmitterTable(columns)


PRECISION_COLUMNS = {  # ThunderSTORM's precision columns -> decode_mem's extras they stand for (module docstring)
    "uncertainty_xy [nm]": ("sigma_x [nm]", "sigma_y [nm]"), "uncertainty [nm]": ("sigma_x [nm]", "sigma_y [nm]"),
    "uncertainty_z [nm]": ("sigma_z [nm]",),
}
MAX_HEADER = 1 << 16
CSV_BLOCK = 1 << 22  # bytes pyarrow parses at a time at most: it reads some 40 blocks ahead of its reader, whatever
# the file (blocks of 80 MB held 3.4 GiB of a 10^8-row CSV, those of 8 MiB 320 MiB; benchmarks/bench_tables.py)


def csv_block(chunk_rows: int) -> int:
    """pyarrow's block size for tables of ``chunk_rows`` rows: about their text (~80 bytes a row), at most
    ``CSV_BLOCK`` (the blocks are then joined to ``chunk_rows``)."""
    return max(1 << 16, min(chunk_rows * 80, CSV_BLOCK))


def read_header(path: str | os.PathLike) -> list[str]:
    """The column names of a CSV's first line (a line quoted as one field holding them all is split again)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            line = fh.readline(MAX_HEADER).decode("utf-8-sig", "replace")
    except OSError as e:
        raise StackError(f"{path}: cannot be read: {exception_line(e, with_type=False)}") from e
    try:
        header = next(csv.reader([line]), [])
        if len(header) == 1 and "," in header[0]:
            header = next(csv.reader([header[0]]), [])
    except csv.Error as e:
        raise StackError(f"{path}: the CSV header cannot be parsed: {exception_line(e, with_type=False)}") from e
    return [h.strip().strip('"').strip() for h in header]


def iter_thunderstorm(path: str | os.PathLike, pixel_size: float, chunk_rows: int = 1 << 20
                      ) -> Iterator[EmitterTable]:
    """A ThunderSTORM CSV (decode_mem's or ThunderSTORM's own) in tables of about ``chunk_rows`` rows, in pixels of
    ``pixel_size`` nm, with pyarrow's streaming reader."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    path = Path(path)
    header = read_header(path)
    if "x [nm]" not in header or "y [nm]" not in header or "frame" not in header:
        raise StackError(f"{path}: not a ThunderSTORM CSV (needs 'frame', 'x [nm]', 'y [nm]' columns)")
    known = ["frame", "x [nm]", "y [nm]", "z [nm]", "intensity [photon]", "offset [photon]"]
    known += [h for h, _ in EXTRA_COLUMNS.values()]
    precision = [h for h in PRECISION_COLUMNS if h in header and not all(t in header for t in PRECISION_COLUMNS[h])]
    if "uncertainty_xy [nm]" in precision and "uncertainty [nm]" in precision:
        precision.remove("uncertainty [nm]")
    used = [h for h in dict.fromkeys(known + precision) if h in header]
    names = [f"c{k}" for k in range(len(header))]  # the file's own names may repeat or be empty
    name_of = {h: names[header.index(h)] for h in used}
    types = {name_of[h]: pa.float64() for h in used}  # ThunderSTORM itself writes frames as "1.0"
    taken: dict[str, bool] = {}  # precision column -> used (decided on the first block: not used when all NaN)
    try:
        reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(skip_rows=1, column_names=names,
                                                                      block_size=csv_block(chunk_rows)),
                                convert_options=pacsv.ConvertOptions(column_types=types,
                                                                     include_columns=list(types)))
        empty = True
        for joined in joined_batches(reader, list(types), chunk_rows):
            cols = {h: joined[name_of[h]] for h in used}
            for h in precision:
                finite = bool(np.isfinite(cols[h]).any())
                if h not in taken and len(cols[h]):
                    taken[h] = finite
                elif h in taken and not taken[h] and finite:
                    warnings.warn(f"{path}: {h} is NaN in the first rows and a number further on: left out",
                                  stacklevel=2)
                for target in PRECISION_COLUMNS[h] if taken.get(h) else ():
                    cols.setdefault(target, cols[h])
            empty = False
            yield table_from_thunderstorm(cols, pixel_size)
    except (pa.ArrowException, OSError) as e:  # pyarrow's message quotes the row over several lines: its first
        raise StackError(f"{path}: cannot parse as a ThunderSTORM CSV: {exception_line(e, with_type=False)}") \
            from e
    if empty:
        yield table_from_thunderstorm({h: np.zeros(0) for h in used if h not in precision}, pixel_size)


def joined_batches(reader: Iterator, names: list[str], chunk_rows: int) -> Iterator[dict[str, np.ndarray]]:
    """pyarrow's record batches of ``reader`` joined into about ``chunk_rows`` rows: ``{name: numpy column}`` (views
    of the buffers where a batch is alone: pyarrow's ``to_numpy`` would import pandas)."""
    from decode_mem.io.arrow_numpy import column_numpy

    parts: list[dict[str, np.ndarray]] = []
    rows = 0
    for batch in reader:
        parts.append({n: column_numpy(batch.column(n)) for n in names})
        rows += batch.num_rows
        if rows >= chunk_rows:
            yield _joined(parts)
            parts, rows = [], 0
    if parts:
        yield _joined(parts)


def _joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return parts[0] if len(parts) == 1 else {n: np.concatenate([p[n] for p in parts]) for n in parts[0]}


class ThunderstormWriter:
    """Streaming CSV writer: ``write(table)`` appends rows; the file appears under its name on close.

    Rows are written as they come, so memory does not grow with the stack. If the block exits with an
    exception the partial file is removed (kept after a ``checkpoint`` where it is a ``Stopped``, for a resume)
    and nothing appears under the final name. The text is made from
    whole columns (``csv_lines``): the bytes ``np.savetxt`` would write with ``formats``, several times faster.
    """

    def __init__(self, path: str | os.PathLike, pixel_size: float, extras: tuple[str, ...] = (),
                 three_d: bool = True) -> None:
        self.path = Path(path)
        self.pixel_size = float(pixel_size)
        self.extras = tuple(extras)
        self.three_d = bool(three_d)
        unknown = [e for e in self.extras if e not in EXTRA_COLUMNS]
        if unknown:
            raise ValueError(f"ThunderstormWriter: unknown extra columns {unknown}")
        self._atomic = ExitStack()
        self._next_id = 1
        self._fh = None
        self._continue: dict[str, int] | None = None  # ``continue_from``: where a killed run's file was whole
        self.continued = False  # the file a killed run left was kept up to its last checkpoint
        self._checkpointed = False  # a checkpoint was taken: a stop keeps the temporary file for a resume
        # fixed decimals: 0.0001 nm / photon everywhere in the field of view (``%g`` would round x to 1 nm
        # beyond 100 µm, i.e. across a 2048-px sCMOS frame); the probability with 6 significant digits
        self._headers = column_headers(self.extras, self.three_d)
        self.formats = ["%d", "%d"] + ["%.4f"] * (len(self._headers) - 2 - len(self.extras)) + [
            "%.6g" if e in COUNT_EXTRAS else "%.4f" for e in self.extras]

    def __enter__(self) -> ThunderstormWriter:
        state = self._continue
        tmp = self._atomic.enter_context(atomic_output(self.path, keep_partial=state is not None,
                                                       keep=self._continuable))
        if state is not None and tmp.is_file() and tmp.stat().st_size >= state["bytes"]:
            self._fh = open(tmp, "r+b")
            self._fh.truncate(state["bytes"])  # what the killed run wrote after its last checkpoint goes
            self._fh.seek(state["bytes"])
            self._next_id, self.continued = int(state["next_id"]), True
            return self
        self._fh = open(tmp, "wb")
        self._fh.write((",".join(f'"{h}"' for h in self._headers) + "\n").encode())
        return self

    def checkpoint(self) -> dict[str, int]:
        """The file's length and next id now, flushed and synced to disk: ``continue_from`` in a resumed run."""
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._checkpointed = True
        return {"bytes": self._fh.tell(), "next_id": self._next_id}

    def _continuable(self, exc: BaseException) -> bool:
        """A stop on request (``Stopped``) after a checkpoint keeps the temporary file, as a kill does: a resumed
        run continues it from the journal's last checkpoint instead of writing every earlier row again. Any
        other error removes it."""
        return self._checkpointed and isinstance(exc, Stopped)

    def continue_from(self, state: dict[str, int]) -> None:
        """Before the ``with`` block: continue the temporary file a killed run left, cut back to ``state`` (its
        ``checkpoint``), rather than write it again; where that file is missing or shorter, start afresh
        (``continued`` says which)."""
        self._continue = {"bytes": int(state["bytes"]), "next_id": int(state["next_id"])}

    def write(self, table: EmitterTable) -> None:
        n = len(table)
        if n == 0:
            return
        cols = thunderstorm_columns(table, self.pixel_size, self.extras, first_id=self._next_id,
                                    three_d=self.three_d)
        for text in csv_lines(list(cols.values()), self.formats):
            self._fh.write(text)
        self._next_id += n

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._fh.close()
        self._atomic.__exit__(exc_type, exc, tb)  # renamed when complete, removed on an error


def write_thunderstorm_csv(table: EmitterTable, path: str | os.PathLike, pixel_size: float,
                           three_d: bool = True) -> None:
    """Write a whole table atomically (all optional columns that the table has)."""
    extras = tuple(c for c in EXTRA_COLUMNS if c in table)
    with ThunderstormWriter(path, pixel_size, extras, three_d) as writer:
        writer.write(table)
