"""Inference, the one obvious way: a stack of any length and frame size in, emitter tables out.

    with open_stack("movie.tif") as stack:
        for table in predict_stack(stack, load_model("model.pt"), chunk_size=512, amp="bf16", device="cuda"):
            writer.write(table)                 # one EmitterTable per block of frames, in frame order

``predict_stack`` = ``plan.choose_sizes`` (``'auto'`` sizes: the fastest that fit the memory budget, from the
planner's prediction) + ``tiling.TiledExecutor`` (exact tiles, frame features computed once per frame, AMP,
out-of-memory back-off) + ``postprocess.detect_candidates`` on each tile's core, computed on the device; the
candidates of a whole block travel to the host in one copy, where ``postprocess.candidates_to_emitters`` makes
the block's table with whole-array operations. Memory is set by ``chunk_size`` and ``batch_size`` (the network's
working set) and ``block`` (whole raw frames on the host); the stack's length does not enter, and no
full-frame output or feature map is ever made. ``process_large_image``
returns the full output map of one image or window, for inspection and for callers that want it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from decode_mem.errors import ConfigError
from decode_mem.footprint.choose import SizeChoice, choose_here, keep_probes
from decode_mem.footprint.engines import choose_engine, compiled_dir
from decode_mem.footprint.inference import RUNTIME_ENGINES
from decode_mem.footprint.request import SizeRequest, Workload
from decode_mem.infer.int8_check import int8_verdict
from decode_mem.infer.probmap import ProbabilityMap
from decode_mem.io.camera import Camera
from decode_mem.io.table import EmitterTable
from decode_mem.model.precision import emulated_bf16
from decode_mem.model.trained import KnownNetwork, TrainedModel
from decode_mem.postprocess import (
    CANDIDATE_WIDTH,
    MARGIN,
    PostprocessConfig,
    candidates_to_emitters,
    detect_candidates,
)
from decode_mem.threads import cpu_threads
from decode_mem.tiling import ArrayStack, BlockResult, FrameSource, Tile, TiledExecutor, as_source
from decode_mem.torch_facts import run_device, torch_threads

if TYPE_CHECKING:
    import torch

    from decode_mem.model.net import DecodeNet

Size = int | Literal["auto"]
Chunk = int | Literal["auto", "whole"]
Amp = Literal["auto", "bf16", "fp16", "off"] | None
DEFAULT_POSTPROCESS = PostprocessConfig()
COMPILE_MIN_WORK = 120_000_000  # network input pixels (frames × tiles × tile area) from which compiling on a CPU
# is chosen: benchmarks/results/compile.md measured a first (cold-cache) compile repaying its cost from 96 M px at
# 256² and 181 M px at 64², a later (warm-cache) one from 21-40 M px


def predict_stack(
    stack: FrameSource | np.ndarray | torch.Tensor,
    model: DecodeNet | TrainedModel,
    *,
    chunk_size: Chunk = "auto",
    batch_size: Size = "auto",
    block: Size = "auto",
    amp: Amp = "auto",
    device: str | torch.device | None = None,
    postprocess: PostprocessConfig = DEFAULT_POSTPROCESS,
    camera: Camera | None = None,
    memory_limit: int | None = None,
    compile: bool | str = False,
    channels_last: bool = True,
    streams: int = 1,
    prob_map: ProbabilityMap | None = None,
    on_plan: Callable[[SizeChoice], None] | None = None,
    on_block: Callable[[BlockResult], None] | None = None,
    threads: int | None = None,
    engine: str = "torch",
) -> Iterator[EmitterTable]:
    """Localize emitters in every frame of ``stack``; yields one ``EmitterTable`` per block, in frame order.

    ``stack``: a ``decode_mem.io.Stack``, anything with ``shape`` and ``blocks()``, or a ``(T, H, W)`` array.
    Frames are 0-based, coordinates global (px, pixel centres at integers); within a frame, rows come tile
    by tile. ``camera`` converts raw frames to photons; by default a ``TrainedModel``'s camera is used and
    a bare ``DecodeNet`` is given photons (pass ``model.net`` to feed photons to a trained model).
    ``device``: where to run (default: where the model is); the model is moved there and put in eval mode.
    ``amp``: 'auto' (the default, as in the CLI: bf16 on CUDA and on CPUs with native bf16, else fp32), 'bf16',
    'fp16' or 'off' (fp32).
    ``chunk_size='whole'``: whole frames (one tile per frame; an out-of-memory error still backs off to tiles).
    ``prob_map``: also write each frame's detection probability (``ProbabilityMap``). ``compile``: run the
    network through ``torch.compile`` ('auto': on a CPU for stacks of at least ``COMPILE_MIN_WORK`` pixels of work,
    where the fused kernels repay the compile time, ``benchmarks/results/compile.md``; GPUs: not measured, so not
    by default; not with ``streams > 1``; a string is torch.compile's mode, e.g. ``'reduce-overhead'``: CUDA
    graphs). ``channels_last``: channels-last weights and inputs (``TileConfig.channels_last``; faster on the CPUs
    measured, on CUDA the default until ``benchmarks/bench_gpu.py`` measures otherwise). ``streams``: blocks
    computed at once on a CPU, each in a thread with an equal share of torch's threads (``TileConfig.streams``;
    ``benchmarks/results/streams.md``); memory is planned for all of them. Not on CUDA, and not with
    ``prob_map`` (its buffer holds one block).
    Sizes ``'auto'`` are the fastest that fit ``memory_limit`` (bytes: host RssAnon on a CPU, device memory
    on CUDA; default ``decode_mem.footprint.choose``'s modest budget); given sizes that cannot fit an explicit
    ``memory_limit`` are a ConfigError. ``on_plan(SizeChoice)`` gets the sizes and why, before the first
    block; ``on_block(BlockResult)`` is called after each block (hook a progress bar or
    ``MemoryTracker.update`` there). ``threads``: torch CPU threads for this run (None: torch's; where torch
    was imported before decode_mem, the idle cores, ``decode_mem.threads``). ``engine``: what computes the
    network on a CPU: 'torch' (the default), 'openvino' or 'onnxruntime' (the ``cpu`` extra; the runtime on the same
    threads, OpenVINO in bf16 where ``amp`` is bf16 on a CPU with native bf16, else fp32; an ``EngineUnavailable``
    where it is missing), 'openvino-int8' (OpenVINO in int8, calibrated once on the checkpoint's training physics;
    close to fp32, not equal: ``model.int8``), or 'auto' (the CLI's default: the fastest of torch, 'openvino',
    'onnxruntime' and, where its check against fp32 on the checkpoint's training physics passed, 'openvino-int8',
    measured on this machine for the plan, remembered; the check is made once per machine and model,
    ``infer.int8_check``; torch where no runtime is installed, with a warning saying why where one fails to load;
    ``decode_mem.footprint.engines``). Set-up errors are raised here, before the first block is read.
    """
    sizes = SizeRequest(chunk_size=chunk_size, batch_size=batch_size, block=block, amp=amp, memory_limit=memory_limit,
                        streams=streams, engine=engine)
    return predict_with(stack, model, sizes, device=device, postprocess=postprocess, camera=camera, compile=compile,
                        channels_last=channels_last, prob_map=prob_map, on_plan=on_plan, on_block=on_block,
                        threads=threads)


def predict_with(stack: FrameSource | np.ndarray | torch.Tensor, model: DecodeNet | TrainedModel,
                 sizes: SizeRequest, *, device: str | torch.device | None = None,
                 postprocess: PostprocessConfig = DEFAULT_POSTPROCESS, camera: Camera | None = None,
                 compile: bool | str = False, channels_last: bool = True, prob_map: ProbabilityMap | None = None,
                 on_plan: Callable[[SizeChoice], None] | None = None,
                 on_block: Callable[[BlockResult], None] | None = None,
                 threads: int | None = None) -> Iterator[EmitterTable]:
    """``predict_stack`` with its sizes as one ``SizeRequest`` (what the engine's settings carry); ``sizes`` goes
    as it is to the planner (``choose_for_stack``), whose plan gives the executor its ``TileConfig``."""
    _check_streams(sizes.streams, _device(getattr(model, "net", model), device), prob_map, compile)  # model untouched
    net, cam, dev = _prepare(model, camera, device, channels_last)
    to_absolute = focal_plane_to_absolute(model, net)
    source = as_source(stack)
    _, h, w = source.shape
    field = getattr(getattr(net, "config", None), "field_shape", None)
    if field is not None and (h, w) != tuple(field):  # the network reads each pixel's place in that field
        raise ConfigError(f"frames of {h}x{w} px: the model's PSF changes across a {field[0]}x{field[1]} px field "
                          "and it localizes movies of that whole field only (the camera's full frame the beads were "
                          "recorded on)")
    itemsize = np.dtype(getattr(source, "dtype", np.float32)).itemsize
    # a runtime asked for by name plans its automatic sizes again with its own timings (below): torch's are not
    # timed for it (nor torch imported, where a run keeps none: ``torch_facts``)
    by_name = sizes.engine in RUNTIME_ENGINES and sizes.automatic
    choice = choose_for_stack(net, source.shape, itemsize, dev, dataclasses.replace(sizes, probe=False) if by_name
                              else sizes)
    plan = choice.plan
    if emulated_bf16(plan.amp, dev):
        warnings.warn("amp bf16 on a CPU without native bf16 (no AVX-512 BF16 or AMX) is slower than fp32 and "
                      "needs more memory (benchmarks/results/throughput.md, memory_table.md); use amp 'auto' or "
                      "'off' on this machine", stacklevel=2)
    per_stream = max(1, (threads or torch_threads()) // sizes.streams)
    simulation = getattr(model, "simulation", None)
    engine = choose_engine(sizes.engine, net, plan, dev, per_stream, simulation=simulation,
                           int8_check=functools.partial(int8_verdict, net, simulation) if simulation else None)
    if engine.fallback:
        warnings.warn(f"engine {engine.why}", stacklevel=2)
    if engine.name != "torch":  # the runtime computes the network: nothing for torch.compile to do
        compile = False
    elif isinstance(net, KnownNetwork):  # torch computes it: the network itself, loaded now (``model.trained``)
        net = _prepared(net.loaded(), dev, channels_last)
    if (engine.name != "torch" and sizes.automatic) or (sizes.engine == "auto" and dev.type == "cpu"):
        # planned again: a runtime's automatic sizes by its own timings (its best batch is not torch's), 'auto's
        # with the runtime's working set; torch taken by 'auto' on a CPU, after the torch network's warm-up, which
        # 'auto' leaves until it is known to be needed (``choose_here``). A runtime asked for by name with given
        # sizes keeps its first plan, made before the runtime was loaded into the baseline
        choice = keep_probes(choose_for_stack(net, source.shape, itemsize, dev,
                                              dataclasses.replace(sizes, engine=engine.name),
                                              warmed=engine.name != "torch",
                                              runtime=engine.engine if engine.name != "torch" else None),
                             plan.probe_bytes)  # the torch units timed above peaked in this process too
        plan = choice.plan
    if sizes.engine != "torch":
        choice = dataclasses.replace(choice, reason=f"{choice.reason}; engine {engine.why}", engine=engine.why)
    compile = resolve_compile(compile, dev, sizes.streams, source.shape[0], plan)
    config = plan.executor_config(compile=compile if isinstance(compile, str) else bool(compile),
                                  channels_last=channels_last)
    if config.compile is True:  # its graphs kept for the next process (a --resume): loaded, not traced again
        config = dataclasses.replace(config, compiled_dir=str(compiled_dir()))
    executor = TiledExecutor(net, (h, w), config, device=dev, camera=cam, engine=engine.engine)
    if on_plan is not None:
        on_plan(dataclasses.replace(choice, compile=compile))  # the decision made here, recorded as made

    def consume(tile: Tile, frames: np.ndarray, output: torch.Tensor) -> torch.Tensor:
        if prob_map is not None:
            prob_map.add(tile, frames, output)
        return detect_candidates(output, frames, config=postprocess, offset=tile.offset, core=tile.core_in_keep)

    def stream() -> Iterator[EmitterTable]:
        with contextlib.nullcontext() if executor.arrays else cpu_threads(threads):  # a runtime's threads are its own
            for result in executor.run(source, consume, prefetch_depth=plan.prefetch_depth):
                if prob_map is not None:
                    prob_map.flush(result.t0, result.n_frames)
                if on_block is not None:
                    on_block(result)
                table = block_emitters(result.results, postprocess, (h, w))
                yield table if to_absolute is None else to_absolute(table)

    return stream()


def focal_plane_to_absolute(model: Any, net: Any) -> Callable[[EmitterTable], EmitterTable] | None:
    """For a network that reads z from the focal plane at each spot's place (``ModelConfig.z_reference``
    'focal_plane'): what makes its tables' z absolute, adding the PSF's focal shift at each localization's place
    (the interpolation the training used, ``simulate.field_spline``); None for other networks. Such a network needs
    its ``TrainedModel``, whose PSF holds the shifts: given bare, a ConfigError before any work."""
    if getattr(getattr(net, "config", None), "z_reference", "absolute") != "focal_plane":
        return None
    field = getattr(model, "psf_field", None)
    if field is None:
        raise ConfigError("this model reads z from the focal plane at each spot's place in the field: give the "
                          "trained model (load_model), whose PSF holds the focal shifts, not its bare network")
    from decode_mem.simulate.field_spline import clamped_thin_plate

    def to_absolute(table: EmitterTable) -> EmitterTable:  # the beads' small system, solved again per block
        at = np.column_stack([table["x"], table["y"]]).astype(np.float64)
        shift = clamped_thin_plate(field.bead_xy, field.bead_shift[:, None], float(max(field.field_shape)), at)[:, 0]
        return EmitterTable({**table.columns, "z": table["z"] + shift.astype(table["z"].dtype)})

    return to_absolute


def resolve_compile(compile: bool | str, device: torch.device, streams: int, n_frames: int, plan: Any) -> bool | str:
    """``compile`` with 'auto' decided: on a CPU, one stream, for at least ``COMPILE_MIN_WORK`` pixels of network
    input over ``n_frames`` frames (a resumed run decides for the whole stack, as its first run did)."""
    if compile != "auto":
        return compile
    return device.type == "cpu" and streams == 1 and n_frames * plan.work_px_per_frame >= COMPILE_MIN_WORK


def block_emitters(candidates: Sequence[torch.Tensor | np.ndarray], postprocess: PostprocessConfig,
                   frame_shape: tuple[int, int]) -> EmitterTable:
    """One block's table from its tiles' ``detect_candidates`` rows (on the device, or arrays): one copy to the
    host, whole-array work there, rows in frame order (within a frame tile by tile)."""
    if not candidates:
        rows = np.zeros((0, CANDIDATE_WIDTH), np.float32)
    elif isinstance(candidates[0], np.ndarray):
        rows = np.concatenate(list(candidates))
    else:
        import torch

        rows = torch.cat(list(candidates)).cpu()
    return candidates_to_emitters(rows, config=postprocess, frame_shape=frame_shape).sorted_by_frame()


def process_large_image(
    frames: np.ndarray | torch.Tensor,
    model: DecodeNet | TrainedModel,
    chunk_size: Size = "auto",
    *,
    batch_size: Size = "auto",
    amp: Amp = "auto",
    device: str | torch.device | None = None,
    camera: Camera | None = None,
    memory_limit: int | None = None,
    threads: int | None = None,
) -> np.ndarray | torch.Tensor:
    """Network output ``(10, H, W)`` (``OUTPUT_CHANNELS``, physical units) of one image, computed tile by tile.

    ``frames``: an ``(H, W)`` image (its own t-1 and t+1 context, as at the ends of a stack) or a
    ``(3, H, W)`` window (t-1, t, t+1). Returns a numpy array for numpy input, a CPU tensor for a tensor.
    Equal to ``net(window[None])[0]`` up to float rounding; only this map is ever full-frame sized.
    ``amp``, ``threads``: as for ``predict_stack``.
    """
    is_tensor = hasattr(frames, "detach")  # a torch tensor
    image = frames.detach().cpu().numpy() if is_tensor else np.asarray(frames)
    if image.ndim == 2:
        source: FrameSource = ArrayStack(image[None])
    elif image.ndim == 3 and image.shape[0] == 3:
        source = _Window(image)
    else:
        raise ConfigError(f"process_large_image: expected an (H, W) image or a (3, H, W) window, got "
                          f"shape {image.shape}")
    net, cam, dev = _prepare(model, camera, device)
    if isinstance(net, KnownNetwork):  # torch computes it
        net = _prepared(net.loaded(), dev, True)
    h, w = image.shape[-2:]
    sizes = SizeRequest(chunk_size=chunk_size, batch_size=batch_size, block=1, amp=amp, memory_limit=memory_limit)
    config = choose_for_stack(net, (1, h, w), image.dtype.itemsize, dev, sizes, margin=0).plan.executor_config()
    executor = TiledExecutor(net, (h, w), config, device=dev, camera=cam)
    out: list[np.ndarray] = []  # allocated at the first tile, with the network's channel count

    def consume(tile: Tile, _frames: np.ndarray, output: torch.Tensor) -> None:
        if not out:
            out.append(np.empty((output.shape[1], h, w), dtype=np.float32))
        cy, cx = tile.core_in_keep
        out[0][:, tile.core[0], tile.core[1]] = output[0, :, cy, cx].float().cpu().numpy()

    with cpu_threads(threads):
        for _ in executor.run(source, consume, prefetch_depth=0):
            pass
    if is_tensor:
        import torch

        return torch.from_numpy(out[0])
    return out[0]


def choose_for_stack(net: Any, shape: tuple[int, int, int], itemsize: int, device: torch.device, sizes: SizeRequest, *,
                     margin: int = MARGIN, warmed: bool = False, runtime: Any = None) -> SizeChoice:
    """``decode_mem.footprint.choose_here`` for a ``(T, H, W)`` stack of ``itemsize``-byte pixels on ``device``;
    ``margin``: the executor's (``MARGIN`` for localization, 0 for ``process_large_image``'s raw maps); ``warmed``:
    planned once already in this process (its warm-up is not paid twice); ``runtime``: the loaded CPU runtime
    that will compute the network, which times the candidate sizes."""
    n, h, w = shape
    return choose_here(net, Workload((int(h), int(w)), device, margin, itemsize, n), sizes, warmed=warmed,
                       runtime=runtime)


def _check_streams(streams: Any, device: torch.device, prob_map: Any, compile: Any) -> None:
    """ConfigError for a ``streams`` that is not a positive integer or that cannot apply here."""
    if isinstance(streams, bool) or not isinstance(streams, (int, np.integer)) or streams < 1:
        raise ConfigError(f"streams must be a positive integer, got {streams!r}")
    if streams == 1:
        return
    if device.type != "cpu":
        raise ConfigError(f"streams {streams}: parallel block streams are for CPUs; on {device} use streams 1")
    if prob_map is not None:
        raise ConfigError(f"streams {streams}: the probability map is written one block at a time; use streams 1")
    if compile is True or (isinstance(compile, str) and compile != "auto"):
        raise ConfigError(f"streams {streams}: torch.compile is not measured from several threads; use streams 1 "
                          "or compile off")


def _prepare(model: DecodeNet | TrainedModel, camera: Camera | None,
             device: str | torch.device | None, channels_last: bool = True) -> tuple[Any, Camera | None, torch.device]:
    """(network in eval mode on the device, camera or None, device); a ``KnownNetwork`` as it is (loaded and
    prepared only where torch computes it: ``predict_with``)."""
    net = getattr(model, "net", model)
    if camera is None:
        camera = getattr(model, "camera", None)
    device = _device(net, device)
    return (net if isinstance(net, KnownNetwork) else _prepared(net, device, channels_last)), camera, device


def _prepared(net: Any, device: Any, channels_last: bool) -> Any:
    """``net`` moved to ``device`` in eval mode, its weights channels-last for a torch module (the executor feeds
    channels-last tensors)."""
    import torch

    net.to(str(device))  # modules move in place; the object passed in stays the one used (wrappers too)
    if isinstance(net, torch.nn.Module):
        net.to(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    net.eval()
    return net


def _device(net: Any, device: str | torch.device | None) -> Any:
    """``device`` resolved (``torch_facts.run_device``); None: where ``net``'s parameters are (CPU without any, and
    for a ``KnownNetwork``, which is loaded on the CPU)."""
    if device is None:
        param = None if isinstance(net, KnownNetwork) else next(iter(net.parameters()), None)
        device = param.device if param is not None else "cpu"
    return run_device(device)


class _Window:
    """One ``(3, H, W)`` window as a one-frame source: its single block is the window itself."""

    def __init__(self, window: np.ndarray) -> None:
        self.window = window
        self.shape = (1, *window.shape[1:])
        self.dtype = window.dtype

    def blocks(self, length: int, context: int = 1) -> Iterator[tuple[int, np.ndarray]]:
        if context != 1:
            raise ValueError(f"a (3, H, W) window has exactly one frame of context, not {context}")
        yield 0, self.window
