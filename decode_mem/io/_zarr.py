"""zarr backend: v2 and v3 arrays (sharded or not), groups, OME-Zarr images (level 0 of the multiscales)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from decode_mem.errors import StackError
from decode_mem.io._layout import Source, normalize_axes

_NO_SERIES = "only TIFF files and bioformats2raw OME-Zarr stores have series"


def open_zarr(path: Path, *, key: str | None, series: int) -> Source:
    """Open a zarr array, or the array a group points to (``key=``, OME multiscales level 0), read-only."""
    import zarr

    try:
        node = zarr.open(str(path), mode="r")
    except Exception as e:
        raise StackError(f"{path}: not a readable zarr array or group ({type(e).__name__}: {e})") from e
    where = str(path)
    axes = None
    if isinstance(node, zarr.Group):
        node, axes, where = _array_in_group(node, key, series, where)
    elif key is not None:
        raise StackError(f"{path}: key={key!r} given, but this is a zarr array, not a group")
    elif series:
        raise StackError(f"{path}: series={series} given, but {_NO_SERIES}")
    if axes is None:
        names = getattr(node.metadata, "dimension_names", None) or node.attrs.get("_ARRAY_DIMENSIONS")
        axes = normalize_axes(names, node.ndim)
    return Source(node, axes, "zarr")


def _multiscales(attrs: Any) -> list[dict]:
    attrs = dict(attrs)
    return attrs.get("multiscales") or attrs.get("ome", {}).get("multiscales") or []  # NGFF 0.4 / 0.5


def _array_in_group(group: Any, key: str | None, series: int, where: str) -> tuple[Any, str | None, str]:
    import zarr

    attrs = dict(group.attrs)
    if "bioformats2raw.layout" in attrs and key is None:  # one OME-Zarr image group per series
        if str(series) not in group:
            raise StackError(f"{where}: series={series} not in this bioformats2raw store")
        return _array_in_group(group[str(series)], None, 0, f"{where}/{series}")
    if series:
        raise StackError(f"{where}: series={series} given, but {_NO_SERIES}")
    multiscales = _multiscales(attrs)
    if key is not None:
        try:
            node = group[key]
        except KeyError as e:
            raise StackError(f"{where}: no {key!r} in this zarr group; it holds {sorted(group.keys())}") from e
        where = f"{where}/{key}"
        if isinstance(node, zarr.Group):
            return _array_in_group(node, None, 0, where)
        paths = [d.get("path") for m in multiscales for d in m.get("datasets", [])]
        axes = normalize_axes(multiscales[0].get("axes"), node.ndim) if key in paths else None
        return node, axes, where
    if multiscales:  # OME-Zarr image: the first dataset is full resolution
        level0 = multiscales[0]["datasets"][0]["path"]
        node = group[level0]
        return node, normalize_axes(multiscales[0].get("axes"), node.ndim), f"{where}/{level0}"
    arrays = sorted(group.array_keys())
    if len(arrays) == 1:
        node = group[arrays[0]]
        return node, None, f"{where}/{arrays[0]}"
    raise StackError(f"{where}: zarr group without OME multiscales metadata: pass key= to pick an array "
                     f"(it holds {sorted(group.keys())})")
