"""Tile grids and the tiled streaming executor (DESIGN.md §5: tiled output == whole-frame output).

* ``TileGrid`` / ``Tile`` / ``grid_axis`` (``grid``): tile geometry as frozen records from pure functions
  (``TilePlan`` and ``plan_axis``: their former names, kept for scripts);
* ``TileConfig`` (``config``): how the work is cut and batched, checked once;
* ``block_length`` / ``FrameSource`` / ``ArrayStack`` / ``BlockResult`` (``blocks``): blocks of frames in and out;
* ``TiledExecutor`` (``executor``): blocks of frames -> exact output per tile core, frame features computed once
  per frame, AMP; with its out-of-memory back-off (``backoff``: ``DeviceMemoryError``, ``is_oom``) and parallel
  block streams on a CPU (``streams``).

Knows no files and no CLIs: imports ``decode_mem.io`` (prefetch) and ``decode_mem.model.precision`` from
below; the network is duck-typed (``TileNetwork``), post-processing is the caller's ``consume`` function.
"""

from decode_mem.tiling.backoff import DeviceMemoryError, is_oom
from decode_mem.tiling.blocks import CPU_BLOCK_PIXELS, ArrayStack, BlockResult, FrameSource, as_source, block_length
from decode_mem.tiling.config import TileConfig
from decode_mem.tiling.executor import TiledExecutor, TileNetwork
from decode_mem.tiling.grid import AxisTile, Tile, TileGrid, grid_axis, halo_for

TilePlan = TileGrid  # deprecated name: "plan" is the memory planner's word (decode_mem.plan)
plan_axis = grid_axis  # deprecated name

__all__ = [
    "CPU_BLOCK_PIXELS",
    "ArrayStack", "AxisTile", "BlockResult", "DeviceMemoryError", "FrameSource", "Tile",
    "TileConfig", "TileGrid", "TileNetwork", "TilePlan", "TiledExecutor", "as_source", "block_length",
    "grid_axis", "halo_for", "is_oom", "plan_axis",
]
