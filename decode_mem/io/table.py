"""EmitterTable: the one in-memory form of localizations and ground truth.

Coordinates follow DESIGN.md §3: ``x`` (column) and ``y`` (row) in pixels with pixel centres at
integer coordinates, ``frame`` 0-based, ``z`` in nm, ``photons`` and ``bg`` (per pixel) in photons.
Optional columns (``prob``, ``sigma_x``/``sigma_y`` in px, ``sigma_z`` in nm, ``sigma_photons``; of two-colour
data ``channel`` (1, 2; 0: seen in both), ``dye`` (1, 2, ...; 0: unassigned) and ``ratio`` (the share of the
photons in channel 2; NaN where one channel alone saw it), ``decode_mem.io.channels``) may be present or not; every
present column has one value per emitter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

REQUIRED = ("frame", "x", "y", "z", "photons", "bg")
OPTIONAL = ("prob", "sigma_x", "sigma_y", "sigma_z", "sigma_photons", "channel", "dye", "ratio")


@dataclass(frozen=True)
class EmitterTable:
    """Columns of equal length, keyed by name; ``frame`` is int64, everything else float32."""

    columns: Mapping[str, np.ndarray]

    def __post_init__(self) -> None:
        missing = [c for c in REQUIRED if c not in self.columns]
        unknown = [c for c in self.columns if c not in REQUIRED + OPTIONAL]
        if missing or unknown:
            raise ValueError(f"EmitterTable: missing columns {missing}, unknown columns {unknown}")
        cols = {c: _column(c, self.columns[c]) for c in REQUIRED + OPTIONAL if c in self.columns}
        lengths = {len(v) for v in cols.values()}
        if len(lengths) > 1:
            raise ValueError(f"EmitterTable: columns differ in length: { {c: len(v) for c, v in cols.items()} }")
        object.__setattr__(self, "columns", cols)

    @classmethod
    def from_arrays(cls, **columns: np.ndarray) -> EmitterTable:
        """``EmitterTable.from_arrays(frame=..., x=..., ...)``; ``z`` and ``bg`` default to 0."""
        n = len(np.atleast_1d(columns["x"]))
        columns.setdefault("z", np.zeros(n, np.float32))
        columns.setdefault("bg", np.zeros(n, np.float32))
        return cls(columns)

    @classmethod
    def empty(cls, optional: Iterable[str] = ()) -> EmitterTable:
        return cls({c: np.zeros(0) for c in (*REQUIRED, *optional)})

    @classmethod
    def concat(cls, tables: Iterable[EmitterTable]) -> EmitterTable:
        """Concatenate tables with the same columns (in order)."""
        tables = list(tables)
        if not tables:
            return cls.empty()
        names = tables[0].names
        if any(t.names != names for t in tables):
            raise ValueError("EmitterTable.concat: tables have different columns")
        return cls({c: np.concatenate([t[c] for t in tables]) for c in names})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.columns)

    def __len__(self) -> int:
        return len(self.columns["frame"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __contains__(self, name: object) -> bool:
        return name in self.columns

    def select(self, mask_or_index: np.ndarray) -> EmitterTable:
        """Rows selected by a boolean mask or an index array."""
        return EmitterTable({c: v[mask_or_index] for c, v in self.columns.items()})

    def sorted_by_frame(self) -> EmitterTable:
        return self.select(np.argsort(self["frame"], kind="stable"))


MAX_FRAME = 2**31 - 1  # the last frame number a movie can have (a stack's frames are counted in int32 elsewhere)
MAX_COORD = float(2**24)  # table pixels: beyond this float32 holds no position to the pixel, so none is real


class RowCheck:
    """Rows that no job can use, left out of a file's tables and counted (``io.localizations`` applies it to every
    format), so that a value a file carries is never silently taken into linking, drift or rendering:

    - ``frame``: not a finite whole number, before the first frame (< 0), or at or after the frame count the file
      (or its run) records (else past ``MAX_FRAME``);
    - ``x``, ``y``: not finite, or more than the image's own width (height) beyond its edges where the file records
      its size and the camera pixel is known in the tables' pixels (``pixel``): a value in another unit or a
      corrupt one, while a fit at the edge or a simulation's margin stays; in any case beyond ``MAX_COORD`` table
      pixels;
    - ``z``, ``bg``: not finite; ``photons``: not finite or negative.

    Optional columns (``sigma_x``, ``prob``, ...) are not checked: a NaN there means "not measured" (rendering falls
    back to its default precision). ``warning()`` says what was left out in one line."""

    def __init__(self, where: str, *, pixel: float | None = None, width: float | None = None,
                 height: float | None = None, frames: int | None = None) -> None:
        """``pixel``: the camera pixel in the tables' pixels; ``width``, ``height``: the image's, in camera pixels;
        ``frames``: the movie's frame count (None: not known)."""
        self.where = where
        self.limits = {name: (-MAX_COORD, MAX_COORD) if pixel is None or size is None else
                       (-0.5 - size * pixel, 2 * size * pixel - 0.5) for name, size in (("x", width), ("y", height))}
        self.frames = frames
        self.rows = 0
        self.dropped: dict[str, int] = {}

    def __call__(self, table: EmitterTable) -> EmitterTable:
        self.rows += len(table)
        if not len(table):
            return table
        bad: dict[str, np.ndarray] = {}
        frame = table["frame"]
        last = MAX_FRAME if self.frames is None else self.frames - 1
        bad["frame"] = (frame < 0) | (frame > last)
        with np.errstate(invalid="ignore"):
            for name in ("x", "y"):
                v = table[name]
                low, high = self.limits[name]
                bad[name] = ~np.isfinite(v) | (v < low) | (v > high)
            for name in ("z", "bg"):
                bad[name] = ~np.isfinite(table[name])
            bad["photons"] = ~np.isfinite(table["photons"]) | (table["photons"] < 0)
        any_bad = np.zeros(len(table), bool)
        for name, rows in bad.items():
            rows = rows & ~any_bad  # each row counted once, under its first bad column
            if rows.any():
                self.dropped[name] = self.dropped.get(name, 0) + int(rows.sum())
                any_bad |= rows
        return table.select(~any_bad) if any_bad.any() else table

    def warning(self) -> str | None:
        """``<file>: N of M localizations left out (x not finite or outside the image: k, ...)``, or None."""
        n = sum(self.dropped.values())
        if not n:
            return None
        why = {"frame": "frame not a frame of the movie", "x": "x not finite or outside the image",
               "y": "y not finite or outside the image", "z": "z not finite", "bg": "background not finite",
               "photons": "photons not finite or negative"}
        return (f"{self.where}: {n} of {self.rows} localizations left out ("
                + ", ".join(f"{text}: {self.dropped[k]}" for k, text in why.items() if k in self.dropped) + ")")


def _column(name: str, values: np.ndarray) -> np.ndarray:
    if name == "frame":
        values = np.atleast_1d(np.asarray(values))
        if values.dtype.kind == "f":  # a frame no movie has (NaN, inf, past int64) becomes -1, never a real frame
            with np.errstate(invalid="ignore"):
                bad = ~np.isfinite(values) | (np.abs(values) > 2.0**62)
            if bad.any():
                values = np.where(bad, -1.0, values)
        return np.ascontiguousarray(values, dtype=np.int64)
    return np.ascontiguousarray(np.atleast_1d(np.asarray(values)), dtype=np.float32)
