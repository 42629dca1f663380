"""``'auto'`` sizes: the fastest tile size and batch whose predicted peak fits a memory budget.

Candidates are planned first (``plan_inference``: no memory is touched); those over the budget are dropped, and
so are smaller tiles that do more than ``1 / (1 - TIE)`` times the network work per frame (halos included) of
larger tiles that fit at the same batch: at one batch, time per frame grows with that work (and smaller tiles pay
more per-call overhead besides), so they cannot come within ``TIE`` of the best; they are neither traced nor
timed. The rest are timed briefly on the real device (``speed``: a unit timed once on a machine is remembered;
with a CPU runtime, by that runtime: ``engines.time_engine_unit``),
the largest tiles first, until ``PROBE_BUDGET_S`` of timing is spent (on a CPU also at most ``PROBE_SHARE`` of
the stack's run; on CUDA every batch of a tile size is timed, smallest first, until one is slower than the best by
more than ``TIE``: there the batch sets the speed several-fold — the first H200 run, whose probing the share cut
short after batch 2, ran the network at 819 frames/s of 256² against 2622 at the batch 8 a repeat timed — and a
unit takes milliseconds); the fastest in frames per second wins —
where several are within ``TIE`` of the best, the one that needs the least memory (so a GPU is filled only as
far as throughput still grows). The default budget is
modest: on a CPU ``DEFAULT_HOST_ALLOWANCE`` of RssAnon above what the process holds when it plans (its baseline:
Python, torch, the model; a laptop keeps working), on CUDA ``DEVICE_FRACTION`` of the free device memory. The
allowance is counted above the baseline, not for the whole process, because the baseline is not the run's to
choose: a process that has touched CUDA starts at ~1 GB of RssAnon (the first GPU run, DESIGN §9), and a notebook
may hold data of its own; a whole-process budget refused CPU work there. ``--memory_limit`` stays a cap on the
whole process. Sizes chosen automatically keep ``PLAN_HEADROOM`` of the budget (on a CPU, of the budget above
the process's measured baseline: a 1.5 GB baseline took 12 % of itself out of a 256 MiB allowance and refused a
run that fit) free for the planner's error and for the spread of identical runs (the errors are in
``benchmarks/results/memory_table.md``; one regeneration under-predicted 1024² frames in 512-px tiles by 11 %, and
its default 2048² run, which chose those tiles, peaked 4 % over the 1 GiB budget); sizes the user gives are refused
only when their plan exceeds the budget itself.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psutil

from decode_mem.config import parse_bytes
from decode_mem.errors import ConfigError
from decode_mem.footprint.engines import remembered_engine_seconds, time_engine_unit
from decode_mem.footprint.fingerprint import remember_receptive_field
from decode_mem.footprint.inference import MARGIN, RUNTIME_ENGINES, InferencePlan, MiB, plan_for, warm_up
from decode_mem.footprint.request import SizeRequest, Workload
from decode_mem.footprint.speed import frames_per_second, measure_working_set, remembered_seconds, time_unit
from decode_mem.footprint.working_set import remembered_ratio
from decode_mem.memory import read_host_memory
from decode_mem.model.trained import is_network
from decode_mem.torch_facts import as_device

if TYPE_CHECKING:
    from decode_mem.model.net import DecodeNet

DEFAULT_HOST_ALLOWANCE = 768 << 20  # bytes of RssAnon a run may add above its process's baseline (docstring): 1 GiB
# less 256 MiB, about what a CPU process holds after importing torch and the shipped model (244 MiB measured with
# torch 2.13 on an AMD EPYC; the infer command's <stem>.json showed 292), so a fresh CPU run keeps ~1 GiB in all
HOST_FRACTION = 0.5  # ... and never more than this share of the available memory
DEVICE_FRACTION = 0.8  # of the free CUDA memory
CHUNKS = (128, 256, 512, 1024, 2048)
BATCHES = {"cpu": (1, 2, 4), "cuda": (1, 2, 4, 8, 16, 32, 64)}
BLOCKS = (16, 8, 4)  # frames per block, tried in this order until the blocks fit their share
PROBE_SHARE = 0.1  # of the stack's estimated run time (at the first timed setting's speed) spent on probing
PROBE_BUDGET_S = 3.0  # seconds of timing per choice at most (remembered units cost nothing)
TIE = 0.05  # candidates within 5 % of the best throughput count as equally fast
PLAN_HEADROOM = 0.12  # of the budget, kept free by automatic choices for the planner's error (module docstring)


def with_headroom(budget: int, baseline: int = 0, device: Any = None) -> int:
    """What sizes chosen automatically may plan for: ``budget`` less ``PLAN_HEADROOM`` of its part above
    ``baseline`` (host memory the process already holds, measured: the planner's error is in what the run adds).
    On a CUDA ``device`` the budget is device memory, which the host baseline is no part of."""
    if device is not None and device.type != "cpu":
        baseline = 0
    return int(baseline + (1 - PLAN_HEADROOM) * max(0, budget - baseline))


@dataclass(frozen=True)
class SizeChoice:
    """The sizes chosen for a stack and why; ``as_dict`` goes into ``<stem>.json``."""

    plan: InferencePlan
    budget_bytes: int
    budget_kind: str
    reason: str
    candidates: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    compile: bool | str | None = None  # what the executor was built with (set by inference; None: not decided)
    engine: str | None = None  # a CPU engine other than torch asked for: what computes the network and why (one line)

    def as_dict(self) -> dict[str, Any]:
        out = {"chunk_size": self.plan.chunk_size, "batch_size": self.plan.batch_size, "block": self.plan.block,
               "prefetch_depth": self.plan.prefetch_depth, "amp": self.plan.amp,
               "budget_mib": round(self.budget_bytes / MiB, 1), "budget": self.budget_kind, "reason": self.reason,
               "plan": self.plan.as_dict(), "candidates": list(self.candidates)}
        if self.engine is not None:
            out["engine"] = self.engine
        return out if self.compile is None else {**out, "compile": self.compile}


def memory_budget(device: Any, memory_limit: int | None, *, modest: bool = True,
                  baseline_bytes: int = 0) -> tuple[int, str]:
    """(bytes, description): ``memory_limit`` if given (the whole process); else, for sizes chosen automatically
    (``modest``), the default of the module docstring — on a CPU ``baseline_bytes`` (the process's RssAnon before
    the run) plus ``host_allowance()``; for sizes given by the user, what the machine has (free device memory,
    available host memory plus what this process holds)."""
    if memory_limit is not None:
        what = "device" if device.type == "cuda" else "host RssAnon"
        return int(memory_limit), f"--memory_limit {memory_limit / MiB:.0f} MiB ({what})"
    if device.type == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info(device)
        fraction = DEVICE_FRACTION if modest else 1.0
        return int(fraction * free), f"{fraction:.0%} of the free device memory"
    if not modest:
        available = psutil.virtual_memory().available
        return int(available) + rss_anon_bytes(), "the available host memory and what this process holds"
    allowance = host_allowance()
    return int(baseline_bytes) + allowance, (f"default host budget: the baseline {baseline_bytes / MiB:.0f} MiB of "
                                             f"RssAnon plus {allowance / MiB:.0f} MiB (min of "
                                             f"{DEFAULT_HOST_ALLOWANCE / MiB:.0f} MiB and half the available)")


def host_allowance() -> int:
    """Bytes of RssAnon a run may add above its process's baseline by default: ``DEFAULT_HOST_ALLOWANCE``, or half
    the available host memory where that is less."""
    return min(DEFAULT_HOST_ALLOWANCE, int(HOST_FRACTION * psutil.virtual_memory().available))


def choose_sizes(net: DecodeNet, frame_shape: tuple[int, int], *, chunk_size: int | str = "auto",
                 batch_size: int | str = "auto", block: int | str = "auto", amp: str | None = "off",
                 device: Any = "cpu", itemsize: int = 2, memory_limit: int | None = None,
                 baseline_bytes: int = 0, n_frames: int | None = None, probe: bool = True,
                 margin: int = MARGIN, streams: int = 1, budget_baseline_bytes: int | None = None) -> SizeChoice:
    """Resolve ``'auto'`` chunk and batch sizes (given integers are kept) for frames of ``frame_shape``: the keyword
    form of ``choose`` (``margin``, ``n_frames``, ``itemsize``, ``device``: the ``Workload``; the others but the
    baselines: the ``SizeRequest``)."""
    h, w = frame_shape
    work = Workload((int(h), int(w)), as_device(device), margin, itemsize, n_frames)
    sizes = SizeRequest(chunk_size=chunk_size, batch_size=batch_size, block=block, amp=amp,
                        memory_limit=memory_limit, streams=streams, probe=probe)
    return choose(net, work, sizes, baseline_bytes=baseline_bytes, budget_baseline_bytes=budget_baseline_bytes)


def choose(net: DecodeNet, work: Workload, sizes: SizeRequest, *, baseline_bytes: int = 0,
           budget_baseline_bytes: int | None = None, before_probe: Callable[[], Any] | None = None,
           runtime: Any = None) -> SizeChoice:
    """Resolve ``sizes``' ``'auto'`` chunk and batch (given integers are kept; 'whole': the frame's longer side)
    for ``work``.

    ``baseline_bytes``: the RssAnon the process holds before the run (the default host budget is counted above it,
    or above ``budget_baseline_bytes`` where given); ``sizes.streams``: blocks computed at once on a CPU (memory is
    planned for all of them; 'auto' gives each the sizes it would choose for one stream); ``before_probe``: called
    before the network is run to measure it (``choose_here``'s warm-up where it waits for one); ``runtime``: the
    loaded CPU runtime that will compute the network (None: torch), with which the candidates are timed (its best
    batch is not torch's: 4 against 2 for int8 at 256² on the 2-core AMX Xeon). Raises ConfigError when
    even the smallest candidate (or the given sizes, or one stream's sizes in every stream) cannot fit the budget.
    """
    device = work.device
    if sizes.chunk_size == "whole":
        sizes = dataclasses.replace(sizes, chunk_size=max(work.frame_shape))
    automatic = sizes.automatic
    blocks = BLOCKS if sizes.block == "auto" else (int(sizes.block),)
    if not automatic and sizes.memory_limit is None:  # the user's sizes, nothing to check them against
        trace = is_network(net)  # duck-typed: geometry
        plan = plan_for(net, work, sizes, baseline_bytes=baseline_bytes, trace=trace)
        if sizes.probe and trace and plan.measured_ratio is None and plan.engine not in RUNTIME_ENGINES and \
                device.type == "cpu":
            # nothing timed at this precision and thread count on this machine yet: plans from the trace alone
            # were 1.25-1.31x under the field benchmark's peaks (field_psf.md at 8685dd2; docs/developers.md); one
            # unit of these sizes measures it (remembered), and its peak in this process is the run's too
            _before(before_probe)
            if measure_working_set(net, plan, device) is not None:
                again = plan_for(net, work, sizes, baseline_bytes=baseline_bytes, trace=trace)
                return _with_probes(SizeChoice(again, 0, "none", "as given"), [again], again.measured_ratio)
        return SizeChoice(plan, 0, "none", "as given")
    budget_base = baseline_bytes if budget_baseline_bytes is None else budget_baseline_bytes
    budget, kind = memory_budget(device, sizes.memory_limit, modest=automatic, baseline_bytes=budget_base)
    usable = with_headroom(budget, budget_base, device) if automatic else budget
    streams = sizes.streams
    if automatic and streams > 1 and device.type == "cpu":
        # every stream gets one stream's sizes: at 2048² two streams ran at 0.57x of one in throughput.md; in a
        # run of the same benchmark and code just before it, <stem>.json showed that auto had picked 128-px tiles
        # (not 256) to fit both (that file was not kept)
        one = choose(net, work, dataclasses.replace(sizes, streams=1), baseline_bytes=baseline_bytes,
                     budget_baseline_bytes=budget_baseline_bytes, before_probe=before_probe, runtime=runtime)
        p = one.plan
        chosen = dataclasses.replace(sizes, chunk_size=p.chunk_size, batch_size=p.batch_size)
        plan = _fitting_plan(net, work, chosen, usable, baseline_bytes, blocks)
        if plan is None:
            least = plan_for(net, work, dataclasses.replace(chosen, block=blocks[-1]), prefetch_depth=0,
                             baseline_bytes=baseline_bytes)
            raise ConfigError(f"streams {streams}: the sizes one stream would use (tile core {p.chunk_size}, batch "
                              f"{p.batch_size}) need {least.need_bytes / MiB:.0f} MiB in {streams} streams, more "
                              f"than {usable / MiB:.0f} MiB ({kind}, less {PLAN_HEADROOM:.0%} headroom); smaller "
                              "tiles would cost more than the streams gain: use one stream or raise --memory_limit")
        return keep_probes(dataclasses.replace(one, plan=plan, reason=f"{one.reason}; the same sizes in {streams} "
                                               "streams"), one.plan.probe_bytes)
    h, w = work.frame_shape
    chunks = _chunk_candidates(sizes.chunk_size, max(h, w))
    batches = _batch_candidates(sizes.batch_size, device)
    plans: list[InferencePlan] = []
    skipped: list[dict[str, Any]] = []
    for batch in batches:
        least_work = None  # network pixels per frame of the largest tiles that fit at this batch
        for chunk in sorted(chunks, reverse=True):
            if least_work is not None:
                px = plan_for(net, work, dataclasses.replace(sizes, chunk_size=chunk, batch_size=batch, block="auto"),
                              trace=False).work_px_per_frame
                if least_work < (1 - TIE) * px:  # more halo work at the same batch: slower by more than TIE
                    skipped.append({"chunk_size": chunk, "batch_size": batch, "predicted_mib": None,
                                    "frames_per_s": None,
                                    "skipped": f"{px / least_work:.2f}x the network work per frame of larger "
                                               "tiles that fit at this batch"})
                    continue
            plan = _fitting_plan(net, work, dataclasses.replace(sizes, chunk_size=chunk, batch_size=batch), usable,
                                 baseline_bytes, blocks)
            if plan is not None:
                plans.append(plan)
                least_work = min(plan.work_px_per_frame, least_work or plan.work_px_per_frame)
    if not plans:
        smallest = plan_for(net, work, dataclasses.replace(sizes, chunk_size=chunks[0], batch_size=batches[0],
                                                           block=blocks[-1]),
                            prefetch_depth=0, baseline_bytes=baseline_bytes)
        room = f"the budget of {budget / MiB:.0f} MiB ({kind})" if usable == budget else \
            f"{usable / MiB:.0f} MiB (the budget of {budget / MiB:.0f} MiB, {kind}, less {PLAN_HEADROOM:.0%} headroom)"
        raise ConfigError(f"chunk_size {chunks[0]}, batch_size {batches[0]} needs {smallest.need_bytes / MiB:.0f} MiB "
                          f"({'device' if device.type == 'cuda' else 'host'}), more than {room}; raise "
                          "--memory_limit or use smaller sizes")
    if len(plans) == 1:
        reason = "as given" if not automatic else "the only setting that fits the budget" if not skipped else \
            "the only setting that fits the budget and is not slowed by more halo work (candidates)"
        return SizeChoice(plans[0], budget, kind, reason, tuple(skipped))
    plans.sort(key=lambda p: (-p.chunk_size, p.batch_size))  # the least halo work first, then small batches
    rows: list[tuple[InferencePlan, float | None]] = []
    probed: list[InferencePlan] = []  # timed in this process now: their working sets are part of the run's peak
    spent, allowance = 0.0, PROBE_BUDGET_S
    cuda = device.type == "cuda"
    best_at: dict[int, float] = {}  # CUDA: the best frames/s timed so far at each tile size
    stopped: set[int] = set()  # CUDA: tile sizes whose throughput stopped growing with the batch
    for plan in plans:
        seconds = remembered_seconds(net, plan, device) if runtime is None else \
            remembered_engine_seconds(net, plan, device, runtime)
        if seconds is None and sizes.probe and spent < allowance and plan.chunk_size not in stopped:
            t0 = time.perf_counter()
            if runtime is None:
                _before(before_probe)
                seconds = time_unit(net, plan, device)
            else:  # the runtime computes the network: torch's warm-up is not needed for it
                seconds = time_engine_unit(net, plan, device, runtime)
            spent += time.perf_counter() - t0
            probed.append(plan)
        fps = None if seconds is None else frames_per_second(plan, seconds)
        if fps and work.n_frames is not None and allowance == PROBE_BUDGET_S and not cuda:  # a short stack: probing
            allowance = min(PROBE_BUDGET_S, PROBE_SHARE * work.n_frames / fps)  # must not cost more than a share of it
        if cuda and fps:  # on a GPU the batch decides (module docstring): time batches up while they gain
            if fps < (1 - TIE) * best_at.get(plan.chunk_size, 0.0):
                stopped.add(plan.chunk_size)
            best_at[plan.chunk_size] = max(fps, best_at.get(plan.chunk_size, 0.0))
        rows.append((plan, fps))
    if sizes.probe and probed and plans[0].engine not in RUNTIME_ENGINES and plans[0].network_bytes and \
            remembered_ratio(device, plans[0].amp) != plans[0].measured_ratio:
        # the units just timed measured the working set against the trace (``working_set``): plan again with it
        again = choose(net, work, dataclasses.replace(sizes, probe=False), baseline_bytes=baseline_bytes,
                       budget_baseline_bytes=budget_baseline_bytes)
        return _with_probes(again, probed, remembered_ratio(device, plans[0].amp))
    timed = [(p, s) for p, s in rows if s is not None]
    if not timed:  # no timing allowed: the largest tiles (least halo work), the smallest batch
        best, reason = plans[0], "largest tiles that fit the budget (not timed)"
    else:
        fastest = max(s for _, s in timed)
        tied = [p for p, s in timed if s >= (1 - TIE) * fastest]
        best = min(tied, key=lambda p: p.need_bytes)
        reason = (f"fastest of {len(timed)} timed settings that fit the budget ({fastest:.2f} frames/s of "
                  f"network work; the least memory among those within {TIE:.0%})")
    table = tuple({"chunk_size": p.chunk_size, "batch_size": p.batch_size, "block": p.block,
                   "predicted_mib": round(p.need_bytes / MiB, 1),
                   "frames_per_s": None if s is None else round(s, 3)} for p, s in rows) + tuple(skipped)
    return _with_probes(SizeChoice(best, budget, kind, reason, table), probed)


def _before(before_probe: Callable[[], Any] | None) -> None:
    """``before_probe()`` where there is one: just before the planner runs the network."""
    if before_probe is not None:
        before_probe()


def _with_probes(choice: SizeChoice, probed: list[InferencePlan], ratio: float | None = None) -> SizeChoice:
    """``choice`` with the largest network working set of the candidates timed in this process (planned with
    ``ratio``, the working set measured while they were timed, where given) as its plan's ``probe_bytes``."""
    if not probed or choice.plan.device != "cpu":
        return choice
    largest = max(dataclasses.replace(p, measured_ratio=ratio or p.measured_ratio).network_host_bytes for p in probed)
    return keep_probes(choice, largest)


def keep_probes(choice: SizeChoice, probe_bytes: int) -> SizeChoice:
    """``choice`` whose plan also counts ``probe_bytes`` of units timed earlier in this process (the larger of them
    and its own ``probe_bytes``): a choice made again in the same process keeps the timing's peak."""
    if probe_bytes <= choice.plan.probe_bytes:
        return choice
    return dataclasses.replace(choice, plan=dataclasses.replace(choice.plan, probe_bytes=int(probe_bytes)))


def choose_sizes_here(net: DecodeNet, frame_shape: tuple[int, int], *, chunk_size: int | str = "auto",
                      batch_size: int | str = "auto", block: int | str = "auto", amp: str | None = "off",
                      device: Any = "cpu", itemsize: int = 2, memory_limit: int | None = None,
                      n_frames: int | None = None, probe: bool = True, margin: int = MARGIN,
                      streams: int = 1, engine: str = "torch", runtime: Any = None) -> SizeChoice:
    """``choose_sizes`` for a run in this process: the keyword form of ``choose_here`` (``runtime``: the loaded
    runtime ``engine`` names, which times the candidates)."""
    h, w = frame_shape
    work = Workload((int(h), int(w)), as_device(device), margin, itemsize, n_frames)
    return choose_here(net, work, SizeRequest(chunk_size=chunk_size, batch_size=batch_size, block=block, amp=amp,
                                              memory_limit=memory_limit, streams=streams, probe=probe,
                                              engine=engine), runtime=runtime)


def choose_here(net: DecodeNet, work: Workload, sizes: SizeRequest, *, warmed: bool = False,
                runtime: Any = None) -> SizeChoice:
    """``choose`` for a run in this process, its baseline measured here: after ``warm_up`` (what every
    run pays first; ``warmed``: this process already did, for this network, device and amp), and again after
    planning, which can leave memory behind that the run keeps (the first fake-tensor trace imports torch's
    compiler stack; timed units hand their freed heap back, ``heap``). Where that pushes automatic sizes past the
    budget's headroom, they are chosen again from the memory the process holds now, among the settings already
    timed.

    On a CPU with an engine other than torch ('auto' or a runtime) the torch network may never run: it is warmed up
    only before the planner runs it to measure it (a repeat run, everything remembered: not at all; 0.2 s of CPU
    on the 2-core AMX Xeon). 'auto' that then takes torch plans again with the warm-up (``infer.predict``).
    ``runtime``: the loaded CPU runtime that will compute the network, which times the candidates (``choose``)."""
    warm = functools.cache(functools.partial(warm_up, net, work.device, sizes.amp))  # once
    wait = not warmed and work.device.type == "cpu" and sizes.engine != "torch"
    if wait:
        remember_receptive_field(net)  # what the warm-up does first, and the tiles need
    elif not warmed:
        warm()
    baseline = rss_anon_bytes()
    choice = choose(net, work, sizes, baseline_bytes=baseline, before_probe=warm if wait else None,
                    runtime=runtime)
    after = rss_anon_bytes()
    if after <= baseline:
        return choice
    choice = dataclasses.replace(choice, plan=dataclasses.replace(choice.plan, baseline_bytes=after))
    if sizes.automatic and choice.plan.need_bytes > with_headroom(choice.budget_bytes, baseline, work.device):
        again = choose(net, work, dataclasses.replace(sizes, probe=False), baseline_bytes=after,
                       budget_baseline_bytes=baseline, runtime=runtime)  # what planning left behind is the run's
        again = keep_probes(again, choice.plan.probe_bytes)
        choice = dataclasses.replace(again, reason=f"{again.reason}; chosen again after planning left "
                                                   f"{(after - baseline) / MiB:.0f} MiB behind")
    return choice


def rss_anon_bytes() -> int:
    """This process's RssAnon now, in bytes (0 where it cannot be read)."""
    return int((read_host_memory().get("rss_anon_mb") or 0.0) * 2**20)


def _chunk_candidates(chunk_size: int | str, largest: int) -> list[int]:
    if chunk_size != "auto":
        return [int(chunk_size)]
    out = [c for c in CHUNKS if c < largest] + [min(c for c in (*CHUNKS, largest) if c >= largest)]
    return sorted(set(out))


def _batch_candidates(batch_size: int | str, device: Any) -> list[int]:
    if batch_size != "auto":
        return [int(batch_size)]
    return list(BATCHES["cuda" if device.type == "cuda" else "cpu"])


def _fitting_plan(net: DecodeNet, work: Workload, sizes: SizeRequest, budget: int, baseline: int,
                  blocks: tuple[int, ...]) -> InferencePlan | None:
    """The plan of ``sizes`` (chunk and batch given) with the longest block of ``blocks`` (and prefetch) that fits
    ``budget``, or None."""
    for depth in (1, 0):
        for block in blocks:
            plan = plan_for(net, work, dataclasses.replace(sizes, block=block), prefetch_depth=depth,
                            baseline_bytes=baseline)
            host_ok = work.device.type != "cuda" or plan.host_bytes - baseline <= max(budget, host_allowance())
            if plan.need_bytes <= budget and host_ok:
                return plan
    return None


__all__ = ["SizeChoice", "choose", "choose_here", "choose_sizes", "choose_sizes_here", "memory_budget", "parse_bytes",
           "rss_anon_bytes"]
