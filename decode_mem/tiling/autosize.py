"""``chunk_size='auto'`` / ``batch_size='auto'``: the largest tiles and batch whose measured peak fits a budget.

The probe runs two small units of real work (one tile, batch 4 and batch 8) and measures their peak
memory: on CUDA the allocator's peak (``max_memory_allocated``), elsewhere the peak of live tensor bytes
counted by a dispatch mode (exact for PyTorch's own allocations; library scratch space is not seen).
Fully convolutional work is proportional to pixels, so ``peak = tile_px * (a + k * batch)``; the plan is
the largest one with that below the budget: ``BUDGET_FRACTION`` of the free device memory on CUDA, of the
available host memory elsewhere (or an explicit ``memory_budget`` in bytes).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import psutil
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from decode_mem.tiling.plan import TilePlan

BUDGET_FRACTION = {"cuda": 0.8, "cpu": 0.5}
MAX_BATCH = 64
MAX_AUTO_CHUNK = 2048
AUTO_MIN_BATCH = 4  # with both sizes 'auto': the largest tiles that still leave room for this batch
PROBE_BATCHES = (4, 8)  # large enough that the temporal phase, which grows fastest, sets the peak

Probe = Callable[[tuple[int, int], int], None]  # (tile shape, batch) -> runs one unit of work


def memory_budget(device: torch.device) -> int:
    """Bytes the executor may use: a fraction of the free CUDA memory, or of the available host memory."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)  # creates a CUDA context, which inference needs anyway
        return int(BUDGET_FRACTION["cuda"] * free)
    return int(BUDGET_FRACTION["cpu"] * psutil.virtual_memory().available)


class _LiveTensorBytes(TorchDispatchMode):
    """Counts the bytes of tensors created inside the mode while they are alive; keeps the peak.

    A storage is counted once (views share it) and released when the tensor that created it is freed.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._owned: set[int] = set()

    def _release(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self._owned.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # torch's dispatch protocol
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0 or key in self._owned:
                continue
            self._owned.add(key)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(t, self._release, key, nbytes)
        return out


def peak_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Peak memory in bytes that ``fn()`` allocates on ``device`` above what was allocated before."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - base)
    counter = _LiveTensorBytes()
    with counter:
        fn()
    return counter.peak


def choose_sizes(shape: tuple[int, int], chunk_size: int | str, batch_size: int | str, *, probe: Probe,
                 device: torch.device, receptive_field: int, factor: int, margin: int,
                 budget: int | None = None) -> tuple[int, int]:
    """Resolve ``'auto'`` chunk and/or batch size for frames of ``shape`` (an int is kept as it is)."""
    if chunk_size != "auto" and batch_size != "auto":
        return int(chunk_size), int(batch_size)
    budget = memory_budget(device) if budget is None else int(budget)
    per_px, per_item_px = _cost_model(probe, device, receptive_field, factor, margin)

    def largest_batch(tile_px: int) -> int:
        room = budget / tile_px - per_px
        return int(max(1, min(MAX_BATCH, room // per_item_px)))

    def fits(tile_px: int, batch: int) -> bool:
        return tile_px * (per_px + per_item_px * batch) <= budget

    def tile_px(chunk: int) -> int:
        ly, lx = TilePlan.build(shape, chunk, receptive_field=receptive_field, factor=factor, margin=margin).tile_shape
        return ly * lx

    if chunk_size == "auto":
        want = AUTO_MIN_BATCH if batch_size == "auto" else int(batch_size)
        largest = min(MAX_AUTO_CHUNK, max(shape))
        candidates = range(max(factor, -(-largest // factor) * factor), 0, -factor)
        chunk = next((c for c in candidates if fits(tile_px(c), want)), factor)
    else:
        chunk = int(chunk_size)
    batch = largest_batch(tile_px(chunk)) if batch_size == "auto" else int(batch_size)
    return chunk, batch


def _cost_model(probe: Probe, device: torch.device, receptive_field: int, factor: int,
                margin: int) -> tuple[float, float]:
    """(bytes per tile px, bytes per tile px and batch item) from two probes on one small tile."""
    side = 2 * (-(-(receptive_field + margin) // factor) * factor) + 4 * factor
    px = side * side
    b0, b1 = PROBE_BATCHES
    p0 = peak_bytes(lambda: probe((side, side), b0), device)
    p1 = peak_bytes(lambda: probe((side, side), b1), device)
    per_item = max(p1 - p0, 1) / (b1 - b0) / px
    fixed = max(p0 / px - per_item * b0, 0.0)
    return fixed, per_item
