"""Which inference engine a run uses (``SizeRequest.engine``), ``'auto'`` measured per machine like the tile sizes.

``'torch'``, ``'openvino'``, ``'onnxruntime'`` or ``'openvino-int8'`` is loaded as asked (a runtime that is
missing or fails is an ``EngineUnavailable``: exit 2 on the command line). ``'auto'`` on a CPU times the plan's
unit of work (a block's steady state: ``batch_size`` new frames, two carried) with torch and with each installed
runtime, taking turns, each its least time (``time_engines``: a shared machine's load only adds time), and takes the
fastest, a runtime only where it is ``AUTO_MARGIN`` faster than torch (among runtimes within ``ENGINE_TIE`` of the
fastest, the one with the least working set: ``preferred``). It considers the
runtimes whose results equal torch's (``model.engine.RUNTIMES``) and int8 (``model.int8``, whose outputs differ
slightly) only where the caller hands it a verdict of int8's check against fp32 that passed (``int8``:
``infer.int8_check``, kept beside the quantized model); a failed verdict is said in the reason. Timings known from
before load only the fastest engine. The seconds are remembered in
``engines.json`` beside the planner's ``throughput.json`` (``$DECODE_MEM_CACHE``'s folder), keyed by the machine,
threads, runtime version, network architecture, tile and unit shape and the network code, so a machine times each
setting once; the converted networks are kept in ``engines/`` there (``model.engine``: once per machine and
checkpoint). ``'auto'`` falls back to torch, saying why in one line, where no runtime is installed or the faster
one fails to load. A runtime computes in bf16 where the plan's amp is bf16 (``runtime_precision``; OpenVINO only:
ONNX Runtime stays fp32), as torch does then; the timings' key holds the amp. On CUDA every choice but ``torch``
is a ConfigError, and ``'auto'`` is torch.

Memory: a runtime keeps each compiled sub-network's working memory between calls (torch reuses one freed pool
for both), so the plan counts ``footprint.inference.RUNTIME_WORKING_SET`` times torch's traced bytes for it; an
``'auto'`` that picks a runtime plans again with it (``tests/plan``: measured peaks within their plan + 15 %), its
candidate sizes timed with the runtime (``time_engine_unit``: a runtime's best batch is not torch's).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import ConfigError
from decode_mem.footprint.cache import cache_path, read_table, remember
from decode_mem.footprint.heap import release_free_heap
from decode_mem.footprint.inference import INT8_WORKING_SET, RUNTIME_WORKING_SET, InferencePlan
from decode_mem.footprint.speed import UNIT_SECONDS, unit_key
from decode_mem.model.engine import (
    ENGINE_CHOICES,
    QUANTIZED,
    RUNTIMES,
    EngineUnavailable,
    TorchEngine,
    installed,
    load_engine,
    runtime_version,
)
from decode_mem.tiling import TiledExecutor
from decode_mem.torch_facts import torch_threads

AUTO_MARGIN = 1.1  # 'auto' takes a runtime only where it is at least this much faster than torch per unit
AUTO_ROUNDS = 5  # 'auto' times the engines taking turns for at least this many rounds (``time_engines``)
ENGINE_TIE = 0.05  # runtimes within 5 % of the fastest per unit count as equally fast: the least memory is taken


@dataclass
class EngineChoice:
    """The engine a run uses and why (``why``: one line; ``fallback``: auto fell back to torch)."""

    engine: Any
    why: str
    fallback: bool = False

    @property
    def name(self) -> str:
        return str(self.engine.name)


def engines_path() -> Path:
    """The remembered engine timings: ``engines.json`` beside the planner's ``throughput.json``."""
    return cache_path().with_name("engines.json")


def converted_dir() -> Path:
    """Where the runtimes' converted networks are kept (``model.engine``): ``engines/`` beside ``engines.json``."""
    return cache_path().with_name("engines")


def compiled_dir() -> Path:
    """Where torch.compile's graphs are kept (``tiling.precompiled``): ``compiled/`` beside ``engines.json``."""
    return cache_path().with_name("compiled")


def engine_key(net: Any, plan: InferencePlan, device: Any, name: str, threads: int) -> str:
    streams = f" in {plan.streams} streams" if plan.streams > 1 else ""
    return f"{unit_key(net, plan, device)}|{runtime_version(name)} x{threads}{streams}"


def _load() -> dict[str, float]:
    return read_table(engines_path())


def _remember(timed: dict[str, float]) -> None:
    """Add ``timed`` (engine key -> seconds) to ``engines.json``, written once."""
    remember(engines_path(), timed)


def time_engines(net: Any, plan: InferencePlan, device: Any, engines: dict[str, Any],
                 rounds: int = AUTO_ROUNDS) -> dict[str, float]:
    """Seconds per unit of work of ``plan`` (a block's steady state, as ``speed.time_unit``) with each of ``engines``
    (name -> engine; ``TorchEngine`` for torch): the engines take turns, one unit each, for at least ``rounds``
    rounds and ``UNIT_SECONDS`` per engine, and each keeps its least time. A shared machine's load only adds time,
    and hits the engines alike while they take turns: the least time is what the engine does on this CPU (timed
    one after the other for 0.3 s each, on a loaded 2-core machine OpenVINO's mean came out 4x its quiet time and
    torch's not, and auto took torch)."""
    tiles, frames = plan.unit_shape
    # noise, not zeros: no runtime takes a short cut on constant input; every engine's input
    data = np.random.default_rng(0).poisson(20.0, (tiles, frames, *plan.tile_shape)).astype(np.float32)
    units = {}
    for name, engine in engines.items():
        ex = TiledExecutor(net, plan.frame_shape, plan.tiles, device=device, engine=engine)
        units[name] = ex.unit(frames - 2, data=data if ex.arrays else _tensor(data), carried=True)
        units[name]()  # warm-up: kernels chosen, buffers made
    least = dict.fromkeys(units, float("inf"))
    t_end, n = time.perf_counter() + UNIT_SECONDS * len(units), 0
    while n < rounds or time.perf_counter() < t_end:
        for name, unit in units.items():
            t = time.perf_counter()
            unit()
            least[name] = min(least[name], time.perf_counter() - t)
        n += 1
    del units
    release_free_heap()
    return least


def _tensor(data: np.ndarray) -> Any:
    """``data`` as a torch tensor (the torch network's input; the same memory)."""
    import torch

    return torch.from_numpy(data)


def remembered_engine_seconds(net: Any, plan: InferencePlan, device: Any, engine: Any) -> float | None:
    """Seconds per unit of work of ``plan`` with the loaded runtime ``engine`` timed before on this machine (by
    ``time_engine_unit``, or by ``choose_engine`` at that plan), or None."""
    value = _load().get(engine_key(net, plan, device, engine.name, engine.threads))
    return float(value) if isinstance(value, (int, float)) else None


def time_engine_unit(net: Any, plan: InferencePlan, device: Any, engine: Any) -> float:
    """Seconds per unit of work of ``plan`` with the loaded runtime ``engine`` (its least over ``time_engines``'
    rounds), measured now and remembered in ``engines.json``: the planner times its candidate sizes with the engine
    that will compute them (``footprint.choose``), whose best batch is not torch's."""
    seconds = time_engines(net, plan, device, {engine.name: engine})[engine.name]
    _remember({engine_key(net, plan, device, engine.name, engine.threads): seconds})
    return seconds


def preferred(seconds: dict[str, float], runtimes: list[str]) -> list[str]:
    """``runtimes`` in the order 'auto' prefers them: those within ``ENGINE_TIE`` of the fastest per unit first,
    among them the least working set (int8's, ``INT8_WORKING_SET``, before the float runtimes'), then by time. The
    units are timed at torch's sizes, where OpenVINO in bf16 and int8 came within 2 % of each other at 2048² on the
    2-core AMX Xeon, while int8's whole command ran 27 s against bf16's 33 s there (each at its own sizes)."""
    fastest = min((seconds[r] for r in runtimes), default=0.0)

    def rank(r: str) -> tuple[bool, float, float]:
        memory = INT8_WORKING_SET if r in QUANTIZED else RUNTIME_WORKING_SET
        return seconds[r] * (1 - ENGINE_TIE) > fastest, memory, seconds[r]

    return sorted(runtimes, key=rank)


def runtime_precision(plan: InferencePlan | None) -> str:
    """What a CPU runtime computes in for ``plan``: 'bf16' where its amp is bf16 (on a CPU, 'auto' resolves to
    bf16 only with native bf16: torch computes in bf16 there too), else 'fp32'."""
    return "bf16" if plan is not None and plan.amp == "bf16" else "fp32"


def choose_engine(name: str, net: Any, plan: InferencePlan, device: Any,
                  threads: int | None = None, simulation: dict[str, Any] | None = None,
                  int8_check: Callable[[int, int, str], Any] | None = None) -> EngineChoice:
    """The engine ``name`` asks for (see the module docstring) for ``plan`` on ``device`` with ``threads``
    threads per stream (None: torch's count now); ``simulation``: the checkpoint's training physics, which
    'openvino-int8' calibrates on. ``int8_check(threads, streams, precision)``: for 'auto', the verdict of int8's
    check against fp32 (``passed``, ``line()``, and the ``engine`` it checked where it loaded one), asked for where
    int8 is installed; None: int8 not considered."""
    if name not in ENGINE_CHOICES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINE_CHOICES)}, got {name!r}")
    if name == "torch" or (name == "auto" and device.type != "cpu"):
        return EngineChoice(TorchEngine(net), "torch" if name == "torch" else f"auto: torch on {device.type}")
    if device.type != "cpu":
        raise ConfigError(f"engine {name}: a CPU runtime; on {device} use engine torch or auto")
    n = int(threads) if threads else torch_threads()
    streams = plan.streams if plan is not None else 1  # threads calling the engine at once
    precision = runtime_precision(plan)
    if name != "auto":
        engine = load_engine(name, net, n, converted_dir(), streams, precision, simulation)
        return EngineChoice(engine, f"{runtime_version(name)}, {n} thread(s)" + (f" x {streams} streams"
                                                                                  if streams > 1 else "")
                            + f", {engine.precision}")
    int8 = int8_check(n, streams, precision) if int8_check is not None and installed(QUANTIZED[0]) else None
    verified = QUANTIZED[0] if int8 is not None and int8.passed else None
    present = [r for r in RUNTIMES if installed(r)] + ([verified] if verified else [])
    int8_note = f"; {int8.line()}" if int8 is not None and not int8.passed else ""
    if not present:
        return EngineChoice(TorchEngine(net), f"auto: torch (no CPU runtime installed: {', '.join(RUNTIMES)}; "
                                              f"pip install -e \".[cpu]\"){int8_note}")
    loaded: dict[str, Any] = {}
    failed: list[str] = []
    if verified and getattr(int8, "engine", None) is not None:
        loaded[verified] = int8.engine  # loaded for its check: not loaded again

    def load(r: str) -> Any:
        return load_engine(r, net, n, converted_dir(), streams, precision, *([simulation] if r in QUANTIZED else []))

    keys = {r: engine_key(net, plan, device, r, n) for r in ("torch", *present)}
    known = _load()
    seconds = {r: float(known[k]) for r, k in keys.items() if isinstance(known.get(k), (int, float))}

    def beats_torch(r: str) -> bool:  # within the timing noise of a shared machine torch is kept
        return seconds[r] <= seconds["torch"] / AUTO_MARGIN

    if len(seconds) == len(keys):  # every timing known: load the preferred only (the next where it fails)
        for r in preferred(seconds, [r for r in present if beats_torch(r)]):
            try:
                loaded[r] = loaded.get(r) or load(r)
                break
            except EngineUnavailable as e:
                failed.append(str(e))
    else:  # time torch and every runtime that loads, taking turns (``time_engines``), and remember them
        for r in present:
            try:
                loaded[r] = loaded.get(r) or load(r)
            except EngineUnavailable as e:
                failed.append(str(e))
        if not loaded:  # nothing to time torch against
            return EngineChoice(TorchEngine(net), "auto: torch; " + "; ".join(failed) + int8_note, fallback=True)
        seconds = time_engines(net, plan, device, {"torch": TorchEngine(net), **loaded})
        _remember({keys[r]: s for r, s in seconds.items()})
    order = preferred(seconds, [r for r in loaded if beats_torch(r)])
    best = order[0] if order else "torch"
    tied = best != "torch" and seconds[best] > min(seconds[r] for r in seconds if r != "torch" and beats_torch(r))
    for r in [r for r in loaded if r != best]:  # a slower runtime's compiled network is not kept
        del loaded[r]
    release_free_heap()
    timings = ", ".join(f"{r} {seconds[r]:.3g} s" for r in keys if r in seconds)  # one order, timed or remembered
    why = f"auto: {best}" + (f" ({loaded[best].precision})" if best != "torch" else "") + \
        (f", within {ENGINE_TIE:.0%} of the fastest per unit of work on this machine and the least memory"
         if tied else ", the fastest per unit of work on this machine") + f" ({timings}; {n} thread(s))"
    if best == verified:
        why += f"; {int8.line()}"
    why += int8_note
    if failed:
        why += "; " + "; ".join(failed)
    engine = loaded[best] if best != "torch" else TorchEngine(net)
    return EngineChoice(engine, why, fallback=bool(failed) and best == "torch")
