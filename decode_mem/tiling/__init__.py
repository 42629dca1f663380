"""Tile plans and the tiled streaming executor (DESIGN.md §5: tiled output == whole-frame output).

* ``TilePlan`` / ``Tile`` / ``plan_axis`` (``plan``): tile geometry as frozen records from pure functions;
* ``TiledExecutor`` / ``TileConfig`` / ``BlockResult`` (``executor``): blocks of frames -> exact output per
  tile core, frame features computed once per frame, AMP, out-of-memory back-off;

Knows no files and no CLIs: imports ``decode_mem.io`` (prefetch) and ``decode_mem.model.precision`` from
below; the network is duck-typed (``TileNetwork``), post-processing is the caller's ``consume`` function.
"""

from decode_mem.tiling.executor import (
    ArrayStack,
    BlockResult,
    DeviceMemoryError,
    FrameSource,
    TileConfig,
    TiledExecutor,
    TileNetwork,
    as_source,
    block_length,
    is_oom,
)
from decode_mem.tiling.plan import AxisTile, Tile, TilePlan, halo_for, plan_axis

__all__ = [
    "ArrayStack", "AxisTile", "BlockResult", "DeviceMemoryError", "FrameSource", "Tile",
    "TileConfig", "TileNetwork", "TilePlan", "TiledExecutor", "as_source", "block_length",
    "halo_for",
    "is_oom", "plan_axis",
]
