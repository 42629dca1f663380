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


def _column(name: str, values: np.ndarray) -> np.ndarray:
    dtype = np.int64 if name == "frame" else np.float32
    return np.ascontiguousarray(np.atleast_1d(np.asarray(values)), dtype=dtype)
