"""Measured speed of units of work, remembered per machine: the planner reports it, ``auto`` reuses it.

One JSON file (``footprint.cache``: ``$DECODE_MEM_CACHE`` or ``~/.cache/decode_mem/throughput.json``) maps a unit
of work — machine (CPU model or GPU name), torch version and threads, network architecture, tile shape, frames and
tiles per call, precision, the network code's ``trace.source_fingerprint`` — to seconds per unit, written
atomically. A unit timed once on a machine by the same code is not timed again there; delete the file to
re-measure. On a CPU each unit timed also measures the network's host working set against its trace
(``working_set``).
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any

from decode_mem.footprint.cache import cache_path, device_name, read_table, remember
from decode_mem.footprint.fingerprint import source_fingerprint
from decode_mem.footprint.heap import release_free_heap
from decode_mem.footprint.inference import InferencePlan
from decode_mem.footprint.working_set import measure_ratio
from decode_mem.tiling import TiledExecutor
from decode_mem.torch_facts import torch_version

if TYPE_CHECKING:
    import torch

UNIT_SECONDS = 0.3  # time units for at least this long after one warm-up unit
CUDA_UNIT_SECONDS = 0.05  # on CUDA (units of milliseconds), after ``CUDA_WARM_UP`` units
CUDA_WARM_UP = 3  # the first calls at a shape: cuDNN's autotuning (``TileConfig.cudnn_benchmark``), lazy kernels


def unit_key(net: Any, plan: InferencePlan, device: Any) -> str:
    cfg = net.config
    arch = (f"d{cfg.depth}f{cfg.features}i{cfg.inter_features}{cfg.activation}{cfg.upsample}{cfg.input_transform}"
            f"{'' if cfg.unshuffle == 1 else f'u{cfg.unshuffle}'}")  # unfolded networks keep their remembered keys
    tiles, frames = plan.unit_shape
    return (f"{device_name(device)}|torch {torch_version()}|{arch}|{plan.tile_shape[0]}x{plan.tile_shape[1]}|"
            f"{tiles}x{frames}|{plan.amp}|carried|code {source_fingerprint()}")


def remembered_seconds(net: Any, plan: InferencePlan, device: Any) -> float | None:
    """Seconds per unit of this plan measured before on this machine, or None."""
    value = read_table(cache_path()).get(unit_key(net, plan, device))
    return float(value) if isinstance(value, (int, float)) else None


def time_unit(net: torch.nn.Module, plan: InferencePlan, device: torch.device) -> float:
    """Seconds per unit of work of ``plan`` on ``device`` (zeros in), measured now and remembered. The unit is
    the one most of a block's units are: with features reused, ``batch_size`` new frames and two carried. On a CPU a
    whole unit (no features carried: what the plan traced) first measures the working set against the trace
    (``working_set``)."""
    measure_working_set(net, plan, device)
    ex = TiledExecutor(net, plan.frame_shape, plan.tiles, device=device)
    unit = ex.unit(plan.unit_shape[1] - 2, carried=True)  # a block's steady state: two frames' features carried
    for _ in range(CUDA_WARM_UP if device.type == "cuda" else 1):  # warm-up: oneDNN / cuDNN choose kernels
        unit()
    _sync(device)
    least = CUDA_UNIT_SECONDS if device.type == "cuda" else UNIT_SECONDS
    t0, n = time.perf_counter(), 0
    while n == 0 or time.perf_counter() - t0 < least:
        unit()
        _sync(device)
        n += 1
    seconds = (time.perf_counter() - t0) / n
    del unit, ex
    release_free_heap()  # the unit's freed working set would otherwise stay in RssAnon for the run (``heap``)
    remember(cache_path(), {unit_key(net, plan, device): seconds})
    return seconds


def measure_working_set(net: torch.nn.Module, plan: InferencePlan, device: torch.device) -> float | None:
    """On a CPU: one whole unit of ``plan`` (no features carried: what its trace counts) run once, its working set
    against the trace measured and remembered (``working_set.measure_ratio``); the ratio, or None elsewhere or where
    it cannot be measured."""
    if device.type != "cpu" or not plan.network_bytes:
        return None
    import torch

    ex = TiledExecutor(net, plan.frame_shape, plan.tiles, device=device)
    with torch.inference_mode():
        ratio = measure_ratio(functools.partial(ex.run_unit, plan.unit_shape[1] - 2), plan.network_bytes, device,
                              plan.amp)
    del ex
    release_free_heap()  # the unit's freed working set would otherwise stay in RssAnon for the run (``heap``)
    return ratio


def frames_per_second(plan: InferencePlan, seconds_per_unit: float) -> float:
    """Frames per second of the whole frame at ``seconds_per_unit`` (network work only)."""
    tiles, frames = plan.unit_shape
    return (frames - 2) * tiles / plan.n_tiles / max(seconds_per_unit, 1e-12)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)
