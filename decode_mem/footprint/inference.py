"""Predicted peak memory of tiled inference, from the network's shape and the tile plan, before anything runs.

Host (RssAnon) = the process's baseline (Python, torch, the model, and the once-per-process costs of the
  first network call, paid by ``warm_up`` before the baseline is read)
+ raw frame blocks in flight (the block being computed, ``prefetch_depth`` read ahead, one being read, and
  a transient copy where the stack's edge frames are repeated)
+ staged tile inputs (CUDA: the pinned unit being copied and the next one)
+ on a CPU, the network's working set for the largest unit of work (traced with fake tensors, ``trace``; times
  the ratio of working set to trace measured on this machine where it is larger, ``working_set``)
  and ``ALLOCATOR_SLACK``: glibc keeps freed blocks below its mmap threshold, which grows up to 32 MiB on
  64-bit Linux, in the heap instead of returning them. Where bf16 is not native (no AVX-512 BF16 / AMX),
  oneDNN computes bf16 convolutions through fp32 buffers that the trace does not see:
  ``EMULATED_BF16`` times the traced bf16 bytes (fitted on an AMD EPYC with torch 2.13; the bf16 rows of
  the memory table show its error). A CPU runtime (``SizeRequest.engine`` 'openvino' / 'onnxruntime',
  ``model.engine``) keeps each compiled sub-network's working memory between calls where torch reuses one pool:
  ``RUNTIME_WORKING_SET`` times the bytes of an fp32 trace, whatever amp says (fitted on an AMD EPYC from one
  256² run of each:
  OpenVINO 2026.4 held 419 MiB above the model where the trace said 157; ``benchmarks/results/cpu_engines.md``
  shows the whole command's peak against this plan). OpenVINO in int8 (``'openvino-int8'``) keeps smaller
  buffers: ``INT8_WORKING_SET`` (first 2.0, from an ad-hoc measurement of the unit of work alone on an AVX2 AMD
  EPYC: 0.68x and 0.79x of what OpenVINO fp32 held; against whole runs that over-planned, 1.16-1.35x their peaks:
  ``cpu_engines.md`` 256² and 2048², ``cpu_engines_wide.md`` 256², and the plan test's 512² runs, so the suite's
  30 % bound on over-planning failed 1 run in 3. 1.5 puts those runs at 0.83-0.96x of their plan, all on that
  EPYC, 2026-12-03; its first run per machine quantizes in a child process, outside this plan: ``model.int8``).
  The memory-table benchmark reports the prediction error on the machine where it runs.
  With ``streams`` blocks computed at once (CPU), each holds its own network working set, slack and block,
  and each stream beyond the first ``STREAM_ARENA_SLACK`` more: its thread allocates from a glibc arena of its
  own, which kept more freed memory than the main heap (fitted on an AMD EPYC with torch 2.13 from the 256²
  and 1024² rows of ``benchmarks/results/streams.md``, which shows its error).
A run that times candidates' units of work in its own process (``choose``: a first run on a machine, or sizes not
timed yet) peaks there too, before its blocks: ``probe_bytes``, the largest network term among them, counts in the
run's predicted peak (``host_bytes``) but not in what a budget is compared with (each candidate timed fitted it).
Device (CUDA) = the network's working set. ``torch.cuda.max_memory_allocated`` counts these tensors and also
cuDNN's workspaces (allocated through torch's caching allocator), which are not planned; the CUDA context is in
neither. On one H200 every measured peak was 1.4-4.5x this prediction (``benchmarks/results/gpu.md``); not fitted
yet (GPU issue).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from decode_mem.footprint.fingerprint import remember_receptive_field, remembered_trace
from decode_mem.footprint.request import SizeRequest, Workload
from decode_mem.footprint.working_set import remembered_ratio
from decode_mem.model.precision import amp_name, emulated_bf16
from decode_mem.model.trained import real_network
from decode_mem.postprocess import MARGIN
from decode_mem.threads import MMAP_THRESHOLD
from decode_mem.tiling import TileConfig, TiledExecutor, block_length
from decode_mem.torch_facts import HOST, as_device

if TYPE_CHECKING:
    import torch

    from decode_mem.model.net import DecodeNet

MiB = float(2**20)
ALLOCATOR_SLACK = 2 * MMAP_THRESHOLD  # two freed blocks at glibc's largest mmap threshold (docstring)
EMULATED_BF16 = 3.3  # RssAnon of bf16 network work without native bf16 / its traced bytes (module docstring)
RUNTIME_WORKING_SET = 2.8  # RssAnon of a CPU runtime's network work / torch's traced bytes (module docstring)
INT8_WORKING_SET = 1.5  # the same for OpenVINO in int8 (module docstring)
RUNTIME_ENGINES = ("openvino", "onnxruntime", "openvino-int8")
STREAM_ARENA_SLACK = 2 * MMAP_THRESHOLD  # per stream beyond the first (module docstring)


@dataclass(frozen=True)
class InferencePlan:
    """What a tiled inference run of one stack will hold, in bytes (see the module docstring), and the executor's
    sizes it was planned for (``tiles``: chunk, batch, block, amp, margin, streams)."""

    frame_shape: tuple[int, int]
    tiles: TileConfig
    prefetch_depth: int
    device: str
    tile_shape: tuple[int, int]
    n_tiles: int
    unit_shape: tuple[int, int]  # (tiles, frames) in the largest network call
    network_bytes: int | None  # None: not traced (sizes given, nothing to check)
    block_bytes: int
    staging_bytes: int
    baseline_bytes: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    engine: str = "torch"  # what computes the network ('auto' is planned as torch until it has chosen)
    measured_ratio: float | None = None  # torch's working set / trace measured on this machine (``working_set``)
    probe_bytes: int = 0  # the largest network working set of the candidates timed in this process (``choose``)

    @property
    def chunk_size(self) -> int:
        return self.tiles.chunk_size

    @property
    def batch_size(self) -> int:
        return self.tiles.batch_size

    @property
    def block(self) -> int:
        return self.tiles.block

    @property
    def amp(self) -> str:
        return self.tiles.amp

    @property
    def margin(self) -> int:
        """px of exact output kept around each tile's core for post-processing."""
        return self.tiles.margin

    @property
    def streams(self) -> int:
        """Blocks computed at once (CPU; ``TileConfig.streams``)."""
        return self.tiles.streams

    def executor_config(self, *, compile: bool | str = False, channels_last: bool = True) -> TileConfig:
        """The ``TileConfig`` to run this plan with: its sizes, and how the network is called (``compile``,
        ``channels_last``: ``TileConfig``'s; they do not change the memory planned)."""
        return dataclasses.replace(self.tiles, compile=compile, channels_last=channels_last)

    @property
    def network_host_bytes(self) -> int:
        """The network's work in host memory: on a CPU its traced working set and the allocator's slack."""
        if self.device != "cpu":
            return 0
        factor = max(EMULATED_BF16 if emulated_bf16(self.amp, HOST) else 1.0, self.measured_ratio or 0.0)
        if self.engine in RUNTIME_ENGINES:  # each sub-network with its own buffers (OpenVINO in bf16 with amp bf16)
            factor = INT8_WORKING_SET if self.engine == "openvino-int8" else RUNTIME_WORKING_SET
        per_stream = int(factor * (self.network_bytes or 0)) + ALLOCATOR_SLACK
        return self.streams * per_stream + (self.streams - 1) * STREAM_ARENA_SLACK

    @property
    def blocks_host_bytes(self) -> int:
        """Host RssAnon while blocks are computed: the baseline, the blocks, staging and the network's work."""
        return self.baseline_bytes + self.block_bytes + self.staging_bytes + self.network_host_bytes

    @property
    def host_bytes(self) -> int:
        """The run's peak host RssAnon: while blocks are computed or, before them, while ``choose`` timed a larger
        candidate's unit of work in this process (``probe_bytes``)."""
        return max(self.blocks_host_bytes, self.baseline_bytes + self.probe_bytes)

    @property
    def device_bytes(self) -> int:
        return (self.network_bytes or 0) if self.device != "cpu" else 0

    @property
    def need_bytes(self) -> int:
        """The number a budget is compared with: device memory on CUDA, host RssAnon while blocks are computed on
        a CPU (a candidate is timed only where its own plan fits the budget)."""
        return self.device_bytes if self.device != "cpu" else self.blocks_host_bytes

    @property
    def work_px_per_frame(self) -> int:
        """Network input pixels per frame (tiles × tile area): the work, halos included."""
        return self.n_tiles * self.tile_shape[0] * self.tile_shape[1]

    def as_dict(self) -> dict[str, Any]:
        return {"frame_shape": list(self.frame_shape), "chunk_size": self.chunk_size, "batch_size": self.batch_size,
                "block": self.block, "prefetch_depth": self.prefetch_depth, "amp": self.amp, "device": self.device,
                "tile_shape": list(self.tile_shape), "n_tiles": self.n_tiles, "streams": self.streams,
                "predicted_host_mib": round(self.host_bytes / MiB, 1),
                "predicted_device_mib": round(self.device_bytes / MiB, 1),
                "network_mib": None if self.network_bytes is None else round(self.network_bytes / MiB, 1),
                "blocks_mib": round(self.block_bytes / MiB, 1),
                "staging_mib": round(self.staging_bytes / MiB, 1), "baseline_mib": round(self.baseline_bytes / MiB, 1),
                "measured_working_set_ratio": self.measured_ratio,
                "timed_candidates_mib": round(self.probe_bytes / MiB, 1)}


def plan_inference(net: DecodeNet, frame_shape: tuple[int, int], *, chunk_size: int, batch_size: int,
                   amp: str | None = "off", device: str | torch.device = "cpu", block: int | str = "auto",
                   itemsize: int = 2, prefetch_depth: int = 1, baseline_bytes: int = 0,
                   n_frames: int | None = None, trace: bool = True, margin: int = MARGIN,
                   streams: int = 1) -> InferencePlan:
    """Predict the peak memory of ``predict_stack`` with these settings (nothing real is allocated); the keyword
    form of ``plan_for``.

    ``baseline_bytes``: the process's RssAnon before the run (Python, torch, the model), measured by the caller.
    ``n_frames``: the stack's length (a block is never longer). ``trace=False`` gives the geometry without the
    network's working set (any duck-typed network). ``margin``: as the executor's (``predict_stack`` keeps
    ``postprocess.MARGIN`` px around each core; it makes the tiles larger). ``streams``: blocks computed at once
    on a CPU (each adds a block and a network working set; always one on CUDA).
    """
    h, w = (int(v) for v in frame_shape)
    work = Workload((h, w), as_device(device), margin, itemsize, n_frames)
    sizes = SizeRequest(chunk_size=chunk_size, batch_size=batch_size, block=block, amp=amp, streams=streams)
    return plan_for(net, work, sizes, prefetch_depth=prefetch_depth, baseline_bytes=baseline_bytes, trace=trace)


def plan_for(net: DecodeNet, work: Workload, sizes: SizeRequest, *, prefetch_depth: int = 1, baseline_bytes: int = 0,
             trace: bool = True) -> InferencePlan:
    """The plan of ``work`` with ``sizes`` (chunk and batch given, block given or 'auto'); see ``plan_inference``."""
    device = work.device
    h, w = work.frame_shape
    n_frames = work.n_frames
    config = tile_config(sizes, work, block=1)  # the streams the device allows, for the block length
    n = block_length((h, w) if n_frames is None else (int(n_frames), h, w), work.itemsize, sizes.block,
                     config.streams)
    if n_frames is not None:
        n = max(1, min(n, int(n_frames)))
    config = dataclasses.replace(config, block=n)
    ex = TiledExecutor(net, (h, w), config, device=device)  # geometry only: nothing is allocated
    run = min(n, ex.batch_size)
    tiles = ex._group(run)
    network = None
    if trace:  # a runtime is planned from an fp32 trace, whatever amp says: ONNX Runtime computes in fp32 (its 128²
        # peak was 640 MiB against 496 planned from a bf16 trace), OpenVINO in bf16 held 528 against 448 (its own
        # layouts do not halve with the precision) and ignores bf16 on a CPU without it
        traced = dataclasses.replace(config, amp="off") if sizes.engine in RUNTIME_ENGINES else config
        network = _traced_peak(net, (h, w), traced, device, run)
    ly, lx = ex.grid.tile_shape
    unit_px = tiles * (run + 2) * ly * lx
    in_flight = (prefetch_depth + 3 if prefetch_depth else 2) + config.streams - 1  # see the module docstring
    if n_frames is not None:  # a short stack has fewer blocks to hold (plus the transient edge copy)
        in_flight = min(in_flight, -(-int(n_frames) // n) + 1)
    blocks = in_flight * (n + 2) * h * w * work.itemsize
    staging = 2 * unit_px * 4 if device.type == "cuda" else 0  # pinned float32 copies in flight
    measured = remembered_ratio(device, config.amp) if trace and sizes.engine not in RUNTIME_ENGINES else None
    return InferencePlan((h, w), config, prefetch_depth, device.type, (ly, lx), len(ex.grid), (tiles, run + 2),
                         network, int(blocks), int(staging), int(baseline_bytes), engine=sizes.engine,
                         measured_ratio=measured)


def tile_config(sizes: SizeRequest, work: Workload, *, block: int) -> TileConfig:
    """The executor's ``TileConfig`` for ``sizes`` (chunk and batch given) with blocks of ``block`` frames: amp
    resolved to the executor's name for the device, streams only on a CPU, ``work``'s margin. The one place sizes
    become a ``TileConfig``."""
    return TileConfig(chunk_size=int(sizes.chunk_size), batch_size=int(sizes.batch_size), block=block,
                      amp=executor_amp(sizes.amp, work.device), margin=work.margin,
                      streams=int(sizes.streams) if work.device.type == "cpu" else 1)


def warm_up(net: Any, device: str | torch.device = "cpu", amp: str | None = "off") -> None:
    """Pay the once-per-process costs of running ``net`` now: the receptive-field probe and the first small
    network call at ``amp`` (oneDNN's or cuDNN's initialization, the autocast kernels). They come with every
    run, so a baseline measured after this call contains them and the plan's other terms are what the run's
    sizes add. (The first fake-tensor trace costs memory too, but only where a trace is not remembered yet:
    ``choose_sizes_here`` reads the baseline again after planning.)"""
    import torch

    device = torch.device(str(device))
    remember_receptive_field(net)  # the probe once per machine and network code, not once per process
    side = 64
    config = tile_config(SizeRequest(chunk_size=side, batch_size=1, amp=amp), Workload((side, side), device, 0),
                         block=1)
    with torch.inference_mode():
        TiledExecutor(net, (side, side), config, device=device).run_unit(1)


def executor_amp(amp: str | None, device: torch.device) -> str:
    """The executor's name for ``amp`` on ``device`` ('auto' resolved): 'off', 'bf16' or 'fp16'."""
    return amp_name(amp, device) or "off"


def _traced_peak(net: DecodeNet, shape: tuple[int, int], config: TileConfig, device: torch.device, run: int) -> int:
    """Peak bytes of live tensors while ``run_unit(run)`` executes, traced with fake tensors (remembered)."""
    def trace() -> int:
        from decode_mem.footprint.trace import fake_network

        with fake_network(real_network(net)) as (fake, counter):
            TiledExecutor(fake, shape, config, device=device).run_unit(run)
            return int(counter.peak)

    what = ["inference", list(shape), config.chunk_size, config.batch_size, config.block, config.amp, device.type, run,
            config.margin]
    return int(remembered_trace(net, what, trace))
