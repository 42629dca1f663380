"""TilePlan geometry: cores partition the frame, reads are aligned and equal-sized, halos cover RF + margin."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest

from decode_mem.errors import ConfigError
from decode_mem.tiling import TilePlan, halo_for, plan_axis


@dataclass(frozen=True)
class Expect:
    size: int
    chunk: int
    reads: list[tuple[int, int]]
    cores: list[tuple[int, int]]
    id: str


# halo 16, factor 4, margin 1
CASES = [
    Expect(100, 32, [(0, 64), (16, 80), (36, 100), (36, 100)], [(0, 32), (32, 64), (64, 96), (96, 100)],
           "last tiles shifted back inside the frame, all 64 px"),
    Expect(65, 32, [(0, 64), (4, 68), (4, 68)], [(0, 32), (32, 64), (64, 65)], "padded 68: read up to 68"),
    Expect(37, 512, [(0, 40)], [(0, 37)], "frame smaller than the chunk: one tile of the padded frame"),
    Expect(40, 16, [(0, 40)], [(0, 40)], "chunk + 2 halo does not fit: one tile"),
    Expect(3, 8, [(0, 4)], [(0, 3)], "tiny frame"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_plan_axis_case_table(case: Expect) -> None:
    tiles = plan_axis(case.size, case.chunk, halo=16, factor=4, margin=1)
    assert [(t.read.start, t.read.stop) for t in tiles] == case.reads
    assert [(t.core.start, t.core.stop) for t in tiles] == case.cores
    assert [(t.keep.start, t.keep.stop) for t in tiles] == [(max(a - 1, 0), min(b + 1, case.size))
                                                            for a, b in case.cores]


@pytest.mark.parametrize("size", [1, 3, 4, 37, 53, 64, 70, 100, 130, 257])
@pytest.mark.parametrize("chunk", [4, 8, 12, 32, 512])
@pytest.mark.parametrize("rf", [0, 5, 44])
def test_plan_axis_invariants(size: int, chunk: int, rf: int) -> None:
    factor, margin = 4, 1
    halo = halo_for(rf, margin, factor)
    padded = -(-size // factor) * factor
    tiles = plan_axis(size, chunk, halo, factor, margin)
    # cores partition [0, size) in order
    assert tiles[0].core.start == 0 and tiles[-1].core.stop == size
    assert all(a.core.stop == b.core.start for a, b in itertools.pairwise(tiles))
    lengths = {t.read.stop - t.read.start for t in tiles}
    assert len(lengths) == 1, "all tiles have the same size"
    for t in tiles:
        assert t.read.start % factor == 0 and t.read.stop % factor == 0
        assert 0 <= t.read.start < t.read.stop <= padded
        assert t.keep == slice(max(t.core.start - margin, 0), min(t.core.stop + margin, size))
        # every kept pixel has its receptive field inside the tile, unless the tile ends at the padded frame's edge
        assert t.read.start == 0 or t.keep.start - rf >= t.read.start
        assert t.read.stop == padded or t.keep.stop - 1 + rf < t.read.stop


def test_tile_plan_2d_ownership_and_local_slices() -> None:
    plan = TilePlan.build((37, 53), 13, receptive_field=5, factor=4, margin=1)  # chunk rounds down to 12
    assert plan.chunk == 12 and plan.halo == 8 and plan.padded_shape == (40, 56)
    owner = np.full((37, 53), -1)
    for k, tile in enumerate(plan.tiles):
        assert np.all(owner[tile.core] == -1), "cores overlap"
        owner[tile.core] = k
        (ky, kx), (cy, cx) = tile.keep_in_read, tile.core_in_keep
        rows = np.arange(tile.read[0].start, tile.read[0].stop)[ky][cy]
        cols = np.arange(tile.read[1].start, tile.read[1].stop)[kx][cx]
        assert (rows[0], rows[-1] + 1, cols[0], cols[-1] + 1) == (
            tile.core[0].start, tile.core[0].stop, tile.core[1].start, tile.core[1].stop)
        assert tile.offset == (tile.keep[0].start, tile.keep[1].start)
    assert (owner >= 0).all(), "cores cover the frame"
    for y, x in [(0, 0), (11, 12), (12, 11), (36, 52), (24, 47)]:
        assert plan.owner(y, x) is plan.tiles[owner[y, x]]
    with pytest.raises(IndexError):
        plan.owner(37, 0)
    assert len({(t.read[0].stop - t.read[0].start, t.read[1].stop - t.read[1].start) for t in plan.tiles}) == 1
    assert "tiles of" in str(plan) and 0 < plan.efficiency <= 1


def test_identity_round_trip_stitches_arange_exactly() -> None:
    """Cut np.arange into tiles, keep each tile's core from its own read region: the stitched copy is exact."""
    h, w = 45, 70
    frame = np.arange(h * w, dtype=np.int64).reshape(h, w)
    padded = np.zeros((48, 72), np.int64)
    padded[:h, :w] = frame
    plan = TilePlan.build((h, w), 16, receptive_field=3, factor=8, margin=1)
    out = np.full_like(frame, -1)
    for tile in plan.tiles:
        tile_data = padded[tile.read]  # what the network is given
        ky, kx = tile.keep_in_read
        cy, cx = tile.core_in_keep
        out[tile.core] = tile_data[ky, kx][cy, cx]
    np.testing.assert_array_equal(out, frame)


def test_bad_sizes_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="chunk_size"):
        TilePlan.build((10, 10), 0, receptive_field=4, factor=4)
    with pytest.raises(ConfigError, match="multiples"):
        plan_axis(10, 6, halo=4, factor=4)
    with pytest.raises(ConfigError, match=">= 1 px"):
        plan_axis(0, 8, halo=4, factor=4)
