"""ThunderSTORM CSV: the text format for localizations and ground truth (DESIGN.md §3).

Columns ``id,frame,x [nm],y [nm],z [nm],intensity [photon],offset [photon],uncertainty [nm]`` then
optional extras; frames 1-based; x/y from the image's outer corner, so pixel centre ``j`` is at
``(j + 0.5) * pixel_size`` nm.
"""

from __future__ import annotations

import csv
import os
import warnings
from pathlib import Path
from types import TracebackType

import numpy as np

from decode_mem.errors import StackError
from decode_mem.io.atomic import partial_path
from decode_mem.io.table import EmitterTable

BASE_COLUMNS = ("id", "frame", "x [nm]", "y [nm]", "z [nm]", "intensity [photon]", "offset [photon]",
                "uncertainty [nm]")
EXTRA_COLUMNS = {  # table column -> (csv header, multiply by pixel size?)
    "prob": ("prob", False),
    "sigma_x": ("sigma_x [nm]", True),
    "sigma_y": ("sigma_y [nm]", True),
    "sigma_z": ("sigma_z [nm]", False),
    "sigma_photons": ("sigma_intensity [photon]", False),
}


class ThunderstormWriter:
    """Streaming CSV writer: ``write(table)`` appends rows; the file appears under its name on close.

    Rows are written as they come, so memory does not grow with the stack. If the block exits with an
    exception the partial file is removed and nothing appears under the final name.
    """

    def __init__(self, path: str | os.PathLike, pixel_size: float, extras: tuple[str, ...] = ()) -> None:
        self.path = Path(path)
        self.pixel_size = float(pixel_size)
        self.extras = tuple(extras)
        unknown = [e for e in self.extras if e not in EXTRA_COLUMNS]
        if unknown:
            raise ValueError(f"ThunderstormWriter: unknown extra columns {unknown}")
        self._tmp = partial_path(self.path)
        self._next_id = 1
        self._fh = None

    def __enter__(self) -> ThunderstormWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self._tmp, "w", newline="")
        header = list(BASE_COLUMNS) + [EXTRA_COLUMNS[e][0] for e in self.extras]
        self._fh.write(",".join(f'"{h}"' for h in header) + "\n")
        return self

    def write(self, table: EmitterTable) -> None:
        n = len(table)
        if n == 0:
            return
        px = self.pixel_size
        if "sigma_x" in table and "sigma_y" in table:
            unc = np.sqrt((table["sigma_x"].astype(np.float64) ** 2 + table["sigma_y"] ** 2) / 2) * px
        else:
            unc = np.full(n, np.nan)
        cols = [
            np.arange(self._next_id, self._next_id + n),
            table["frame"] + 1,
            (table["x"].astype(np.float64) + 0.5) * px,
            (table["y"].astype(np.float64) + 0.5) * px,
            table["z"],
            table["photons"],
            table["bg"],
            unc,
        ]
        for extra in self.extras:
            scale = px if EXTRA_COLUMNS[extra][1] else 1.0
            cols.append(table[extra].astype(np.float64) * scale if extra in table else np.full(n, np.nan))
        data = np.column_stack([np.asarray(c, dtype=np.float64) for c in cols])
        fmt = ["%d", "%d"] + ["%.6g"] * (data.shape[1] - 2)
        np.savetxt(self._fh, data, fmt=fmt, delimiter=",")
        self._next_id += n

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._fh.close()
        if exc_type is None:
            os.replace(self._tmp, self.path)
        else:
            self._tmp.unlink(missing_ok=True)


def write_thunderstorm_csv(table: EmitterTable, path: str | os.PathLike, pixel_size: float) -> None:
    """Write a whole table atomically (all optional columns that the table has)."""
    extras = tuple(c for c in EXTRA_COLUMNS if c in table)
    with ThunderstormWriter(path, pixel_size, extras) as writer:
        writer.write(table)


def read_thunderstorm_csv(path: str | os.PathLike, pixel_size: float) -> EmitterTable:
    """Read a ThunderSTORM CSV (ours or ThunderSTORM's own) back into pixel units, frames 0-based."""
    path = Path(path)
    if not path.is_file():
        raise StackError(f"{path}: no such localization file")
    with open(path, newline="") as fh:
        header = next(csv.reader(fh), None)
    if not header or "x [nm]" not in header or "frame" not in header:
        raise StackError(f"{path}: not a ThunderSTORM CSV (needs 'frame', 'x [nm]', 'y [nm]' columns)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy warns on a header-only file: that is an empty table
        data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    if data.size == 0:
        data = np.zeros((0, len(header)))
    col = {h: data[:, i] for i, h in enumerate(header)}
    n = len(data)
    px = float(pixel_size)
    columns = {
        "frame": col["frame"].astype(np.int64) - 1,
        "x": col["x [nm]"] / px - 0.5,
        "y": col["y [nm]"] / px - 0.5,
        "z": col.get("z [nm]", np.zeros(n)),
        "photons": col.get("intensity [photon]", np.zeros(n)),
        "bg": col.get("offset [photon]", np.zeros(n)),
    }
    for name, (header_name, in_px) in EXTRA_COLUMNS.items():
        if header_name in col:
            columns[name] = col[header_name] / px if in_px else col[header_name]
    return EmitterTable(columns)
