"""napari reader: a localization file decode_mem writes or reads opens as a rendered image and points
(``decode_mem.napari.layers``). A file that is not one (another plugin's CSV, an HDF5 without Picasso's yaml)
gets no reader from here, so napari offers its others."""

from __future__ import annotations

import csv
import os
from collections.abc import Callable
from pathlib import Path

from decode_mem.io.localizations import FORMATS
from decode_mem.napari.layers import LayerData, open_localizations

Reader = Callable[[str | list[str]], list[LayerData]]


def get_reader(path: str | list[str]) -> Reader | None:
    """``read_localizations`` for paths that are all localization files, else None."""
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    if not paths or not all(is_localization_file(p) for p in paths):
        return None
    return read_localizations


def read_localizations(path: str | list[str]) -> list[LayerData]:
    """Every file's image and points layers."""
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    return [layer for p in paths for layer in open_localizations(p).layers]


def is_localization_file(path: str | os.PathLike) -> bool:
    """A file of one of the localization formats: a CSV with ThunderSTORM's columns, a Picasso HDF5 with its yaml,
    a parquet file (its columns are checked when read)."""
    path = Path(path)
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None or not path.is_file():
        return False
    if fmt == "csv":
        try:
            with open(path, newline="") as fh:
                header = next(csv.reader(fh), [])
        except (OSError, UnicodeDecodeError, csv.Error):
            return False
        return {"frame", "x [nm]", "y [nm]"} <= set(header)
    if fmt == "picasso":
        return path.with_suffix(".yaml").is_file()
    return True
