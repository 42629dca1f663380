"""zarr backend: v2 and v3 arrays (sharded or not), groups, OME-Zarr images (level 0 of the multiscales).

A store's metadata is a claim: an array may say it holds far more frames than its writer wrote, or chunks of no
size. What the store holds is found by listing its keys once when it opens (``MissingChunks.survey``: a cost in the
chunks that exist, never in the frames the metadata claim), so that the stack ends with its last stored chunk and a
store whose missing chunks cover more than the damage budget (``io.damage``) is refused before any frame is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import StackError, exception_line
from decode_mem.io._layout import Source, normalize_axes

KNOWN_CHUNKS = 4096  # chunk lookups remembered (MissingChunks)
_NO_SERIES = "only TIFF files and bioformats2raw OME-Zarr stores have series"


def open_zarr(path: Path, *, key: str | None, series: int) -> Source:
    """Open a zarr array, or the array a group points to (``key=``, OME multiscales level 0), read-only."""
    import zarr

    try:
        node = zarr.open(str(path), mode="r")
    except Exception as e:
        raise StackError(f"{path}: not a readable zarr array or group ({exception_line(e, limit=200)})") from e
    where = str(path)
    axes = None
    try:
        if isinstance(node, zarr.Group):
            node, axes, where = _array_in_group(node, key, series, where)
        elif key is not None:
            raise StackError(f"{path}: key={key!r} given, but this is a zarr array, not a group")
        elif series:
            raise StackError(f"{path}: series={series} given, but {_NO_SERIES}")
        if axes is None:
            names = getattr(node.metadata, "dimension_names", None) or _attrs(node).get("_ARRAY_DIMENSIONS")
            axes = normalize_axes(names, node.ndim)
        grid = storage_grid(node)
    except StackError:
        raise
    except Exception as e:  # metadata zarr parsed but that do not describe an array: edited, or not a store's
        raise StackError(f"{where}: the zarr metadata do not describe a readable array "
                         f"({exception_line(e, limit=200)})") from e
    if len(grid) != node.ndim or any(int(n) < 1 for n in grid):
        raise StackError(f"{where}: the zarr metadata give chunks of shape {tuple(grid)} for an array of shape "
                         f"{tuple(node.shape)}: every chunk must be at least 1 along every axis")
    holes = MissingChunks(node)
    return Source(node, axes, "zarr", holes=holes, damaged=holes.damaged)


def _attrs(node: Any) -> dict:
    """A node's attributes as a mapping ({} where the .zattrs / attributes are not one: edited by hand)."""
    try:
        attrs = dict(node.attrs)
    except Exception:
        return {}
    return attrs


def is_zarr(path: Path) -> bool:
    """A folder that is a zarr store (its name or its metadata files say so)."""
    return path.suffix.lower() == ".zarr" or any((path / m).exists() for m in (".zarray", ".zgroup", "zarr.json"))


def storage_grid(array: Any) -> tuple[int, ...]:
    """The shape of what the store holds as one object: the shard of a sharded array, else the chunk."""
    return tuple(getattr(array, "shards", None) or array.chunks)


def chunk_exists(array: Any, coords: tuple[int, ...]) -> bool:
    """Is the stored object (chunk or shard) at grid position ``coords`` in the store? zarr reads a missing one as
    the fill value, silently."""
    key = array.metadata.encode_chunk_key(tuple(coords))
    key = f"{array.path}/{key}" if array.path else key
    root = getattr(array.store, "root", None)
    if isinstance(root, Path):  # a local store: one stat, not a round trip through zarr's event loop (~2 ms)
        return (root / key).is_file()
    from zarr.core.sync import sync

    return bool(sync(array.store.exists(key)))


def stored_positions(array: Any) -> np.ndarray:
    """The grid positions of the objects (chunks, or shards of a sharded array) the store holds for ``array``, as an
    ``(n, ndim)`` array, from one listing of the store's keys: a cost in what is stored, not in what the metadata
    claim. Keys that are not chunk keys of the array's grid (metadata, stray files) are left out."""
    from zarr.core.sync import sync

    meta = array.metadata
    encoding = getattr(meta, "chunk_key_encoding", None)
    if encoding is not None:  # zarr v3: 'c/0/1/2' (default) or '0.1.2' (v2 encoding)
        sep = encoding.separator
        prefix = f"c{sep}" if encoding.name == "default" else ""
    else:  # zarr v2: '0.1.2' or '0/1/2'
        sep, prefix = getattr(meta, "dimension_separator", None) or ".", ""
    base = f"{array.path}/" if array.path else ""
    ndim = len(array.shape)
    counts = tuple(-(-int(n) // int(g)) for n, g in zip(array.shape, storage_grid(array), strict=True))

    async def keys() -> list[tuple[int, ...]]:
        found = []
        async for key in array.store.list_prefix(base):
            rest = key[len(base):]
            if not rest.startswith(prefix):
                continue
            parts = rest[len(prefix):].split(sep)
            if len(parts) != ndim or not all(p.isdigit() for p in parts):
                continue
            coords = tuple(int(p) for p in parts)
            if all(c < n for c, n in zip(coords, counts, strict=True)):
                found.append(coords)
        return found

    return np.array(sync(keys()), dtype=np.int64).reshape(-1, ndim)


class MissingChunks:
    """``Source.holes`` of a zarr array: the pixels of a read that lie in chunks (shards) missing from the store.
    A read is checked against the listing the open made (``survey``; 8 bytes per stored chunk), so a store that holds
    every chunk a read needs is not asked again; a chunk the listing lacks is looked up in the store (one stat on a
    local disk, a round trip on a remote one: it may have been written since) and remembered, a few bytes each."""

    def __init__(self, array: Any) -> None:
        self.array = array
        self.grid = storage_grid(array)
        self.known: dict[tuple[int, ...], bool] = {}
        self._survey: dict[tuple, tuple[int, int]] = {}
        self._listing: tuple[np.ndarray, np.ndarray, tuple[int, ...]] | None = None  # positions, codes, extent

    def listed(self) -> np.ndarray:
        """The grid positions the store held when first listed (``stored_positions``, once per open)."""
        if self._listing is None:
            positions = stored_positions(self.array)
            extent = tuple(int(v) + 1 for v in positions.max(axis=0)) if len(positions) else (0,) * positions.shape[1]
            codes = np.sort(np.ravel_multi_index(positions.T, extent)) if len(positions) else np.zeros(0, np.int64)
            self._listing = positions, codes, extent
        return self._listing[0]

    def _in_listing(self, coords: tuple[int, ...]) -> bool:
        self.listed()
        _, codes, extent = self._listing
        if not len(codes) or any(c >= e for c, e in zip(coords, extent, strict=True)):
            return False
        code = np.ravel_multi_index(coords, extent)
        i = int(np.searchsorted(codes, code))
        return i < len(codes) and int(codes[i]) == code

    def survey(self, layout: Any, n_frames: int) -> tuple[int, int]:
        """``(frames, damaged)`` from one listing of the store: ``frames`` up to the end of the last time-chunk
        the store holds (the array may be larger than what its writer wrote before it stopped), ``damaged`` how many
        of those lie in a time-chunk with a chunk missing at some Y/X position (for the channel and z read)."""
        key = (layout.frame, layout.fixed, n_frames)
        if key not in self._survey:
            self._survey[key] = self._count(layout, n_frames)
        return self._survey[key]

    def _count(self, layout: Any, n_frames: int) -> tuple[int, int]:
        positions = self.listed()
        for axis, index in layout.fixed:  # the chunks of the channel / z / series read
            positions = positions[positions[:, axis] == index // self.grid[axis]]
        per_frame = -(-self.array.shape[layout.y] // self.grid[layout.y]) * \
            -(-self.array.shape[layout.x] // self.grid[layout.x])
        if layout.frame is None:
            return n_frames, 0 if len({(p[layout.y], p[layout.x]) for p in positions}) == per_frame else n_frames
        if not len(positions):
            return 0, 0
        step = self.grid[layout.frame]
        times, counts = np.unique(positions[:, layout.frame], return_counts=True)  # Y/X chunks stored per time-chunk
        frames = min(n_frames, (int(times.max()) + 1) * step)
        starts = times[(counts == per_frame) & (times * step < frames)] * step
        held = int(np.minimum(step, frames - starts).sum())
        return frames, frames - held

    def frames_stored(self, layout: Any, n_frames: int) -> int:
        """Frames up to the end of the last time-chunk in the store (``survey``)."""
        return self.survey(layout, n_frames)[0]

    def damaged(self, layout: Any, n_frames: int) -> int:
        """Frames of the first ``n_frames`` in a time-chunk with a chunk missing (``survey``)."""
        return self.survey(layout, n_frames)[1]

    def __call__(self, layout: Any, t: int | slice, ys: slice, xs: slice) -> dict[int, tuple[Any, str]]:
        import numpy as np

        grid, shape = self.grid, self.array.shape
        frames = [t] if isinstance(t, int) else list(range(t.start, t.stop, t.step or 1))
        y0, y1 = ys.start or 0, shape[layout.y] if ys.stop is None else ys.stop
        x0, x1 = xs.start or 0, shape[layout.x] if xs.stop is None else xs.stop
        ysteps, xsteps = ys.step or 1, xs.step or 1
        holes: dict[int, tuple[Any, str]] = {}
        fixed = dict(layout.fixed)
        for i, frame in enumerate(frames):
            coords = [fixed.get(a, 0) // grid[a] for a in range(len(grid))]
            if layout.frame is not None:
                coords[layout.frame] = frame // grid[layout.frame]
            mask = None
            missing = 0
            for cy in range(y0 // grid[layout.y], (max(y1, y0 + 1) - 1) // grid[layout.y] + 1):
                for cx in range(x0 // grid[layout.x], (max(x1, x0 + 1) - 1) // grid[layout.x] + 1):
                    coords[layout.y], coords[layout.x] = cy, cx
                    key = tuple(coords)
                    if self._in_listing(key):
                        continue
                    exists = self.known.get(key)
                    if exists is None:
                        exists = chunk_exists(self.array, key)
                        if len(self.known) >= KNOWN_CHUNKS:  # bounded: a chunk asked about again costs one stat
                            self.known = {}  # a new table: a read in another thread keeps the one it looked at
                        self.known[key] = exists
                    if exists:
                        continue
                    missing += 1
                    if mask is None:
                        mask = np.zeros((len(range(y0, y1, ysteps)), len(range(x0, x1, xsteps))), bool)
                    yy = np.arange(y0, y1, ysteps) // grid[layout.y] == cy
                    xx = np.arange(x0, x1, xsteps) // grid[layout.x] == cx
                    mask[np.ix_(yy, xx)] = True
            if mask is not None:
                what = f"{missing} chunk(s) missing from the zarr store (zarr reads them as the fill value)"
                holes[i] = (None if mask.all() else mask, what)
        return holes


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
