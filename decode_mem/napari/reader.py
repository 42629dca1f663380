"""napari reader: a localization file decode_mem writes or reads opens as a rendered image and points
(``decode_mem.napari.layers``): ThunderSTORM CSV, Picasso and DECODE HDF5, parquet, SMAP ``_sml.mat``, ShareLoc
``.smlm``, rapidSTORM ``.txt``. A file that is not one (another plugin's CSV, an HDF5 without Picasso's yaml or
DECODE's layout, a MATLAB file without SMAP's ``saveloc``) gets no reader from here, so napari offers its others."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable
from pathlib import Path

from decode_mem.errors import StackError
from decode_mem.io.localizations import file_format
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
    """A file of one of the localization formats, by a look at its header: a CSV with ThunderSTORM's columns, a
    Picasso HDF5 with its yaml, a DECODE emitter set, a MATLAB file with SMAP's ``saveloc``, a zip with a
    ``manifest.json``, a rapidSTORM table, a parquet file (its columns are checked when read)."""
    path = Path(path)
    if not path.is_file():
        return False
    try:
        fmt = file_format(path)
    except (StackError, ValueError, OSError):
        return False
    try:
        if fmt == "csv":
            from decode_mem.io.thunderstorm import read_header

            return {"frame", "x [nm]", "y [nm]"} <= set(read_header(path))
        if fmt == "picasso":
            return path.with_suffix(".yaml").is_file()
        if fmt == "smap":
            from decode_mem.io.smap import smap_fields

            return bool(smap_fields(path))
        if fmt == "smlm":
            with zipfile.ZipFile(path) as zf:
                return "manifest.json" in zf.namelist()
        if fmt == "rapidstorm":
            from decode_mem.io.rapidstorm import is_rapidstorm

            return is_rapidstorm(path)
    except (StackError, OSError, zipfile.BadZipFile, ValueError):
        return False
    return True  # parquet; DECODE (known by its content)
