"""'auto' chunk and batch sizes: the measured peak of the chosen configuration fits the budget."""

from __future__ import annotations

import pytest
import torch

from decode_mem.model import DecodeNet, ModelConfig
from decode_mem.tiling import TileConfig, TiledExecutor, memory_budget, peak_bytes
from decode_mem.tiling.autosize import MAX_BATCH

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tiny() -> DecodeNet:
    torch.manual_seed(0)
    return DecodeNet(ModelConfig.tiny()).eval()


def test_peak_bytes_counts_live_tensors_not_the_sum() -> None:
    def two_in_a_row() -> None:
        a = torch.empty(1_000_000)  # 4 MB, freed before the next one
        del a
        b = torch.empty(500_000)
        c = b[:10]  # a view: no new memory
        del b, c

    assert peak_bytes(lambda: torch.empty(1_000_000), CPU) == 4_000_000
    assert peak_bytes(two_in_a_row, CPU) == 4_000_000


def _unit_peak(ex: TiledExecutor) -> int:
    """Measured peak of one unit of work at the executor's tile shape and batch."""
    return peak_bytes(lambda: ex._probe(ex.plan.tile_shape, ex.batch_size), CPU)


@pytest.mark.parametrize("budget_mb", [24, 64])
def test_auto_chunk_is_the_largest_that_fits(tiny: DecodeNet, budget_mb: int) -> None:
    budget = budget_mb * 2**20
    ex = TiledExecutor(tiny, (400, 400), TileConfig(chunk_size="auto", batch_size=4, memory_budget=budget))
    assert _unit_peak(ex) <= budget
    bigger = TiledExecutor(tiny, (400, 400), TileConfig(chunk_size=ex.chunk_size + 32, batch_size=4))
    assert _unit_peak(bigger) > 0.8 * budget  # not far from the largest: one step up (nearly) breaks the budget
    assert ex.chunk_size % tiny.downsample_factor == 0


def test_auto_batch_grows_with_the_budget_and_is_capped(tiny: DecodeNet) -> None:
    batches = []
    for budget_mb in (32, 96):
        budget = budget_mb * 2**20
        ex = TiledExecutor(tiny, (256, 256), TileConfig(chunk_size=64, batch_size="auto", memory_budget=budget))
        assert _unit_peak(ex) <= budget
        batches.append(ex.batch_size)
    assert 1 <= batches[0] < batches[1] < MAX_BATCH
    huge = TiledExecutor(tiny, (64, 64), TileConfig(chunk_size=64, batch_size="auto", memory_budget=2**40))
    assert huge.batch_size == MAX_BATCH


def test_both_auto_prefers_whole_small_frames_and_default_budget_is_positive(tiny: DecodeNet) -> None:
    ex = TiledExecutor(tiny, (60, 50), TileConfig(chunk_size="auto", batch_size="auto", memory_budget=2**30))
    assert len(ex.plan) == 1 and ex.plan.tile_shape == (60, 52) and ex.batch_size > 4
    tight = TiledExecutor(tiny, (60, 50), TileConfig(chunk_size="auto", batch_size="auto", memory_budget=1))
    assert tight.batch_size == 1 and tight.chunk_size == tiny.downsample_factor  # nothing fits: the smallest
    assert memory_budget(CPU) > 0
