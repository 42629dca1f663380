"""Tile geometry (the tile grid): plain frozen records built by pure functions, one axis first, then the frame.

A frame of ``H x W`` px is seen by the network as its *padded* frame ``H' x W'`` (H and W rounded up to
multiples of the down-sampling factor ``F``, zeros in normalized units at the bottom/right; DESIGN.md §5).
Each tile has three regions per axis:

* ``read``  -- the part of the padded frame fed to the network: both ends multiples of ``F`` in global
  coordinates, inside ``[0, H')``; all tiles of a grid have the same size, so they batch together (the
  first and last tiles are shifted back inside the frame instead of being padded);
* ``core``  -- the pixels the tile *owns*: the cores partition ``[0, H)`` exactly (``owner``);
* ``keep``  -- ``core`` grown by ``margin`` px (clipped to the frame): exact output that post-processing
  needs around the core to decide about pixels on the core's edge.

The halo (read minus core) is at least ``receptive_field + margin`` rounded up to ``F`` on every side
that is not the padded frame's edge, so every kept pixel has its whole receptive field inside the tile
and its value equals the whole-frame value.
"""

from __future__ import annotations

import bisect
import numbers
from dataclasses import dataclass
from functools import cached_property

from decode_mem.errors import ConfigError


@dataclass(frozen=True, slots=True)
class AxisTile:
    """One tile along one axis: ``read`` (padded-frame coordinates), ``core`` and ``keep`` (frame coordinates)."""

    read: slice
    core: slice
    keep: slice


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def halo_for(receptive_field: int, margin: int, factor: int) -> int:
    """Halo in px: ``receptive_field + margin`` rounded up to a multiple of ``factor`` (and at least ``factor``)."""
    return max(factor, round_up(receptive_field + margin, factor))


def grid_axis(size: int, chunk: int, halo: int, factor: int, margin: int = 0) -> tuple[AxisTile, ...]:
    """Tiles along an axis of ``size`` px (padded to a multiple of ``factor``); ``chunk`` is the core size.

    ``chunk`` and ``halo`` must be multiples of ``factor``. When one tile of ``chunk + 2 * halo`` would not
    fit inside the padded axis, the axis is a single tile covering it all.
    """
    if size < 1:
        raise ConfigError(f"tile grid: frame size must be >= 1 px, got {size}")
    if factor < 1 or chunk < factor or chunk % factor or halo < 0 or halo % factor:
        raise ConfigError(f"tile grid: chunk ({chunk}) and halo ({halo}) must be multiples of the factor "
                          f"({factor}), chunk >= factor")
    padded = round_up(size, factor)
    length = chunk + 2 * halo
    if chunk >= size or length >= padded:
        return (AxisTile(slice(0, padded), slice(0, size), slice(0, size)),)
    tiles = []
    for c0 in range(0, size, chunk):
        c1 = min(c0 + chunk, size)
        r0 = min(max(c0 - halo, 0), padded - length)  # shifted back inside the padded axis: equal sizes
        keep = slice(max(c0 - margin, 0), min(c1 + margin, size))
        tiles.append(AxisTile(slice(r0, r0 + length), slice(c0, c1), keep))
    return tuple(tiles)


@dataclass(frozen=True, slots=True)
class Tile:
    """One 2-D tile: ``read``/``core``/``keep`` as (rows, cols) slice pairs, ``index`` = (tile row, tile col)."""

    index: tuple[int, int]
    read: tuple[slice, slice]
    core: tuple[slice, slice]
    keep: tuple[slice, slice]

    @property
    def keep_in_read(self) -> tuple[slice, slice]:
        """``keep`` relative to the tile's own output array."""
        return tuple(slice(k.start - r.start, k.stop - r.start) for k, r in zip(self.keep, self.read, strict=True))

    @property
    def core_in_keep(self) -> tuple[slice, slice]:
        """``core`` relative to the ``keep`` array (what post-processing calls its ``core``)."""
        return tuple(slice(c.start - k.start, c.stop - k.start) for c, k in zip(self.core, self.keep, strict=True))

    @property
    def offset(self) -> tuple[int, int]:
        """Global (y, x) of the ``keep`` array's pixel (0, 0)."""
        return self.keep[0].start, self.keep[1].start


@dataclass(frozen=True)
class TileGrid:
    """Tiles of one frame size. Build with ``TileGrid.build``; ``tiles`` are in raster order."""

    shape: tuple[int, int]
    chunk: int
    halo: int
    factor: int
    margin: int
    rows: tuple[AxisTile, ...]
    cols: tuple[AxisTile, ...]

    @classmethod
    def build(cls, shape: tuple[int, int], chunk: int, *, receptive_field: int, factor: int,
              margin: int = 0) -> TileGrid:
        """Plan for frames of ``shape = (H, W)``; ``chunk`` is rounded down to a multiple of ``factor``."""
        h, w = (int(v) for v in shape)
        if isinstance(chunk, bool) or not isinstance(chunk, numbers.Integral) or chunk < 1:
            raise ConfigError(f"chunk_size must be a positive integer, got {chunk!r}")
        chunk = max(factor, int(chunk) // factor * factor)
        halo = halo_for(receptive_field, margin, factor)
        return cls((h, w), chunk, halo, factor, margin,
                   grid_axis(h, chunk, halo, factor, margin), grid_axis(w, chunk, halo, factor, margin))

    @property
    def padded_shape(self) -> tuple[int, int]:
        return round_up(self.shape[0], self.factor), round_up(self.shape[1], self.factor)

    @property
    def tile_shape(self) -> tuple[int, int]:
        """(rows, cols) read by every tile of the grid."""
        r, c = self.rows[0].read, self.cols[0].read
        return r.stop - r.start, c.stop - c.start

    @cached_property
    def tiles(self) -> tuple[Tile, ...]:
        return tuple(
            Tile((i, j), (r.read, c.read), (r.core, c.core), (r.keep, c.keep))
            for i, r in enumerate(self.rows) for j, c in enumerate(self.cols)
        )

    def __len__(self) -> int:
        return len(self.rows) * len(self.cols)

    def owner(self, y: int, x: int) -> Tile:
        """The one tile whose core contains pixel (y, x) (row, column): the ownership rule for emitters."""
        if not (0 <= y < self.shape[0] and 0 <= x < self.shape[1]):
            raise IndexError(f"pixel ({y}, {x}) is outside the {self.shape[0]}x{self.shape[1]} frame")
        i = bisect.bisect_right([t.core.start for t in self.rows], y) - 1
        j = bisect.bisect_right([t.core.start for t in self.cols], x) - 1
        return self.tiles[i * len(self.cols) + j]

    @property
    def efficiency(self) -> float:
        """Owned px / read px: the fraction of network work that is not halo."""
        ly, lx = self.tile_shape
        return self.shape[0] * self.shape[1] / (len(self) * ly * lx)

    def __str__(self) -> str:
        ly, lx = self.tile_shape
        return (f"TileGrid({self.shape[0]}x{self.shape[1]} px: {len(self.rows)}x{len(self.cols)} tiles of "
                f"{ly}x{lx}, chunk {self.chunk}, halo {self.halo}, factor {self.factor}, "
                f"{100 * self.efficiency:.0f}% useful)")
