"""The tiled streaming executor: blocks of frames in, exact network output per tile core out.

Work order, and why memory is set by the chunk, batch and block sizes only:

* a *block* of ``n`` frames (plus one context frame each side) is read from the stack by a background
  thread (``prefetch``) while the previous block is computed;
* inside a block the loop is tile-major: a *group* of ``g`` tiles walks through the block in *runs* of
  ``s`` windows (``g * s ~ batch_size``). The frame U-Net runs once per (tile, frame); the features of the
  last two frames of a run are carried into the next run, so each frame's features serve all three
  windows that need them (DECODE runs the frame U-Net three times per frame). Only the two context
  frames of a block are computed twice (once in each neighbouring block): ``(n + 2) / n`` frame-U-Net work;
* each finished (tile, run) goes to ``consume(tile, frames, output)`` with the exact output of the tile's
  ``keep`` region; the executor never holds a full-frame output. What ``consume`` returns is collected
  per block and handed out as a ``BlockResult``.

On an out-of-memory error the block is redone with smaller sizes (``backoff``); with ``streams > 1`` (CPU) that
many blocks are computed at once (``streams``). The parts: ``config`` (``TileConfig``), ``blocks`` (block
length, frame sources, ``BlockResult``), ``grid`` (tile geometry), ``backoff``, ``streams`` and this module, the
network work of one block.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from decode_mem.errors import ConfigError
from decode_mem.io.prefetch import prefetch
from decode_mem.model import arrays as model_arrays
from decode_mem.model.engine import network_digest
from decode_mem.model.precision import autocast, resolve_amp
from decode_mem.tiling.backoff import BackOff
from decode_mem.tiling.blocks import BlockResult, FrameSource, block_length
from decode_mem.tiling.config import TileConfig
from decode_mem.tiling.grid import Tile, TileGrid
from decode_mem.tiling.streams import run_streams
from decode_mem.torch_facts import HOST, HostDevice, torch_version

if TYPE_CHECKING:
    import torch

DEFAULT_CONFIG = TileConfig()  # frozen: one shared default


class TileNetwork(Protocol):
    """What the executor needs from a network (``decode_mem.model.DecodeNet`` has it)."""

    downsample_factor: int

    def receptive_field(self) -> int: ...
    def level_stride(self, height: int, width: int) -> int: ...
    def level_from_sample(self, photons: torch.Tensor) -> torch.Tensor: ...
    def normalize(self, x: torch.Tensor, level: torch.Tensor | None = None, read_var: Any = None,
                  **origin: Any) -> torch.Tensor: ...  # ``origin=``: models with ``config.field_shape`` only
    def frame_features(self, x_norm: torch.Tensor) -> torch.Tensor: ...
    def temporal(self, f_prev: torch.Tensor, f_mid: torch.Tensor, f_next: torch.Tensor) -> torch.Tensor: ...


Consume = Callable[[Tile, np.ndarray, Any], Any]  # (tile, frames, its output: a tensor, or an array)


@contextlib.contextmanager
def cudnn_benchmark() -> Iterator[None]:
    """``torch.backends.cudnn.benchmark`` on inside, as it was after (only that flag: TF32 and the rest stay)."""
    import torch

    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


class TiledExecutor:
    """Runs a network over a stack tile by tile; see the module docstring.

    ``camera`` (a ``decode_mem.io.camera.Camera``: ``to_photons``, ``read_variance``, ``load_maps``) converts
    raw frames to photons on the device, with its per-pixel sCMOS maps when it names them; without it the
    frames are taken to be photons with no read noise. Each frame's level (``normalize``) is computed once
    from the whole frame, before it is cut into tiles. The network is used as it is (eval mode, on ``device``).
    ``engine`` (``decode_mem.model.engine``, CPU only): a runtime that computes ``frame_features`` and ``temporal``
    instead of the modules (in the engine's own precision; the executor's autocast and ``compile`` then act on
    nothing). A runtime that takes numpy arrays (``takes_arrays``) gets them: the levels, staging, normalization
    and stitching around it are then done on arrays (``model.arrays``; ``arrays`` says so, and ``consume`` gets
    arrays), except for a model whose PSF changes across the field, whose run keeps tensors.
    """

    def __init__(self, net: TileNetwork, shape: tuple[int, int], config: TileConfig = DEFAULT_CONFIG, *,
                 device: torch.device | str = "cpu", camera: Any = None, engine: Any = None) -> None:
        self.net, self.config, self.camera = net, config, camera
        on_cpu = (device.type if hasattr(device, "type") else str(device).split(":")[0]) == "cpu"  # not checked here
        self.shape = (int(shape[0]), int(shape[1]))
        self.factor = int(net.downsample_factor)
        self.arrays = (bool(getattr(engine, "takes_arrays", False)) and on_cpu
                       and getattr(getattr(net, "config", None), "field_shape", None) is None)
        self._device = device  # ``device``: torch's, made where a tensor needs it (planning knows the type only)
        self._kind = HOST if on_cpu else self.device  # what ``device.type`` asks of it, without torch on a CPU
        self._maps = None  # per-pixel camera maps on the device (arrays: numpy), grown to the padded frame
        if camera is not None and getattr(camera, "has_maps", False):
            padded = tuple(-(-v // self.factor) * self.factor for v in self.shape)
            self._maps = camera.load_maps(self.shape).padded(padded)
            if not self.arrays:
                self._maps = self._maps.to_torch(self.device)
        self.receptive_field = int(net.receptive_field())
        self.engine = engine  # a ``model.engine`` back end for the two sub-networks (None: the modules, torch)
        if engine is not None and engine.name != "torch":  # a CPU runtime: not compiled by torch
            self._frame_features, self._temporal = engine.frame_features, engine.temporal
            if getattr(engine, "lends_outputs", False):  # no copy of its outputs: each is used before the next call
                self._frame_features = functools.partial(engine.frame_features, borrow=True)
                self._temporal = functools.partial(engine.temporal, borrow=True)
        elif config.compiled_dir and config.compile is True and on_cpu:  # kept on disk
            from decode_mem.tiling.precompiled import Precompiled

            folder = Path(config.compiled_dir) / f"torch-{torch_version()}-{network_digest(net)}"
            self._frame_features = Precompiled(net.frame_features, folder, "frame_features")
            self._temporal = Precompiled(net.temporal, folder, "temporal")
        elif config.compile:  # one graph per input shape: a block's first run (k + 2 frames) and the carried runs
            import torch

            mode = self.config.compile if isinstance(self.config.compile, str) else None
            self._frame_features = torch.compile(net.frame_features, dynamic=False, mode=mode)
            self._temporal = torch.compile(net.temporal, dynamic=False, mode=mode)
        # else the network's own methods (``_frame_features``, ``_temporal``), looked up when first called: an
        # executor made for its geometry (the planner's) does not load a network that stands in for the real one
        self.backoff = BackOff(self._grid, config.chunk_size, config.batch_size, factor=self.factor,
                               max_retries=config.max_retries, device=self._kind)

    @functools.cached_property
    def _frame_features(self) -> Callable[..., Any]:
        return self.net.frame_features

    @functools.cached_property
    def _temporal(self) -> Callable[..., Any]:
        return self.net.temporal

    @functools.cached_property
    def device(self) -> Any:
        """Where the network runs: torch's device (``HOST``, torch's CPU as named without torch, where the executor
        works on ``arrays``)."""
        if self.arrays:
            return HOST
        import torch

        return torch.device("cpu" if isinstance(self._device, HostDevice) else self._device)

    @functools.cached_property
    def _amp(self) -> Any:
        """The autocast dtype (None: fp32; a runtime computes in its own precision)."""
        return None if self.arrays else resolve_amp(self.config.amp, self.device)

    @functools.cached_property
    def _format(self) -> Any:
        """The memory format of the network's inputs (torch's)."""
        import torch

        return torch.channels_last if self.config.channels_last else torch.contiguous_format

    @property
    def grid(self) -> TileGrid:
        """The tile grid computed with now (smaller after an out-of-memory back-off)."""
        return self.backoff.grid

    @property
    def batch_size(self) -> int:
        """Windows (tile x frame) per network call now."""
        return self.backoff.batch_size

    @property
    def chunk_size(self) -> int:
        """The tile core asked for (before rounding to the down-sampling factor), or the chunk last backed off to."""
        return self.backoff.chunk_size

    @property
    def backoffs(self) -> list[str]:
        """One line per out-of-memory back-off so far."""
        return self.backoff.log

    def _grid(self, chunk: int) -> TileGrid:
        return TileGrid.build(self.shape, chunk, receptive_field=self.receptive_field, factor=self.factor,
                              margin=self.config.margin)

    def block_length(self, itemsize: int = 4, n_frames: int | None = None) -> int:
        shape = self.shape if n_frames is None else (n_frames, *self.shape)
        return block_length(shape, itemsize, self.config.block, self.config.streams)

    # ------------------------------------------------------------------ driver
    def run(self, source: FrameSource, consume: Consume, *, prefetch_depth: int = 1) -> Iterator[BlockResult]:
        """Yield one ``BlockResult`` per block of ``source``, in frame order.

        ``consume(tile, frames, output)`` gets the global 0-based frame indices of a run and the exact network
        output ``(len(frames), 10, *keep)`` of the tile's ``keep`` region, on the executor's device; it may be a
        runtime's own buffer, valid during the call only (what ``consume`` keeps, it copies). After an
        out-of-memory back-off it is called again for the tiles of the block being redone. Host memory: the
        block being computed, ``prefetch_depth`` blocks read ahead and one being read, plus one unit's staging.
        """
        _, h, w = source.shape
        if (h, w) != self.shape:
            raise ConfigError(f"frames are {h}x{w} px, the executor was planned for {self.shape[0]}x{self.shape[1]}")
        itemsize = np.dtype(getattr(source, "dtype", np.float32)).itemsize
        blocks = source.blocks(self.block_length(itemsize, source.shape[0]), context=1)
        if prefetch_depth:
            blocks = prefetch(blocks, depth=prefetch_depth, cancel=getattr(source, "stop_waiting", None))
        if self.config.streams > 1 and self._kind.type == "cpu":
            yield from run_streams(blocks, source.shape[0], self.config.streams, self.backoff,
                                   lambda t0, frames: self._attempt(t0, frames, consume),
                                   lambda t0, frames, retries: self._block(t0, frames, consume, retries))
            return
        for t0, frames in blocks:
            yield self._block(t0, frames, consume)

    def _attempt(self, t0: int, frames: np.ndarray, consume: Consume, retries: int = 0,
                 start: float | None = None) -> BlockResult:
        """One try at a block with the current sizes; an out-of-memory error propagates to the caller."""
        start = time.perf_counter() if start is None else start
        results = self._run_block(np.asarray(frames), t0, consume)
        return BlockResult(t0, len(frames) - 2, tuple(results), self.grid.chunk, self.batch_size, retries,
                           time.perf_counter() - start)

    def _block(self, t0: int, frames: np.ndarray, consume: Consume, retries: int = 0) -> BlockResult:
        """One block, backing off and redoing it on an out-of-memory error (``retries``: back-offs so far)."""
        start = time.perf_counter()
        return self.backoff.retry(lambda tries: self._attempt(t0, frames, consume, tries, start), t0, retries)

    # ------------------------------------------------------------------ one block
    def frame_levels(self, frames: np.ndarray) -> torch.Tensor | np.ndarray:
        """Each frame's level (``DecodeNet.normalize``) from its whole raw frame: ``(len(frames),)`` on the device
        (an array where the executor works on ``arrays``).

        Read on the sub-grid ``level_stride`` picks, converted to photons like the tiles, so the level of a
        frame does not depend on how it is tiled.
        """
        h, w = self.shape
        s = int(self.net.level_stride(h, w))
        sample = np.ascontiguousarray(frames[:, ::s, ::s])
        if not self.arrays:
            import torch

            sample = torch.from_numpy(sample).to(self.device)
        if self.camera is not None:
            maps = None if self._maps is None else self._maps.crop(slice(0, h, s), slice(0, w, s))
            sample = self.camera.to_photons(sample, maps)
        if self.arrays:
            return model_arrays.level_from_sample(self.net.config, sample)
        return self.net.level_from_sample(sample.float()).to(self.device)

    def _run_block(self, frames: np.ndarray, t0: int, consume: Consume) -> list[Any]:
        """``frames``: ``(n + 2, H, W)``, the block with one context frame each side."""
        n = len(frames) - 2
        levels = self.frame_levels(frames)
        tiles = self.grid.tiles
        run = min(n, self.batch_size)  # windows per run
        group = self._group(run)  # tiles per run
        units = [(tiles[g0:g0 + group], r0, min(r0 + run, n)) for g0 in range(0, len(tiles), group)
                 for r0 in range(0, n, run)]
        staged = (self._stage(frames, *unit) for unit in units)
        if self._kind.type == "cuda":  # gather + pin the next unit on the host while the device computes
            staged = prefetch(staged, depth=1)
        results, carry = [], None
        try:
            with self._no_grad():
                for (group_tiles, r0, r1), host in zip(units, staged, strict=True):
                    f0, f1 = self._frames_needed(r0, r1)
                    x = self._to_device(host, group_tiles, levels[f0:f1])
                    if r0 == 0:  # a new group of tiles: the last group's carried features are dead, free them
                        carry = None
                    out, carry = self._compute(x, r1 - r0, carry)
                    frame_ids = np.arange(t0 + r0, t0 + r1)
                    for i, tile in enumerate(group_tiles):
                        ky, kx = tile.keep_in_read
                        results.append((tile.index, r0, consume(tile, frame_ids, out[i, :, :, ky, kx])))
                    del host, x, out  # one unit's tensors at a time: not alive while the next is staged and run
        finally:
            staged.close()  # stops the staging thread now, also when a unit failed
        results.sort(key=lambda r: (r[0], r[1]))  # tile raster order, then frames
        return [r[2] for r in results]

    def _frames_needed(self, r0: int, r1: int) -> tuple[int, int]:
        """Block-local frame range to read for windows ``r0 .. r1-1`` (window w uses frames w, w+1, w+2)."""
        carried = 2 if (self.config.reuse_features and r0 > 0) else 0
        return r0 + carried, r1 + 2

    def _no_grad(self) -> contextlib.AbstractContextManager:
        """Torch's inference mode around a block's network work; nothing where the executor works on arrays."""
        if self.arrays:
            return contextlib.nullcontext()
        import torch

        return torch.inference_mode()

    def _stage(self, frames: np.ndarray, tiles: Sequence[Tile], r0: int, r1: int) -> torch.Tensor | np.ndarray:
        """Host tensor ``(len(tiles), nf, Ly, Lx)`` float32 of the tiles' read regions (pinned on CUDA; an array
        where the executor works on ``arrays``).

        Pixels of the padded frame beyond the real frame are left at 0 here and set to 0 again after
        normalization (0 in normalized units is what the whole-frame pass pads with).
        """
        f0, f1 = self._frames_needed(r0, r1)
        ly, lx = self.grid.tile_shape
        if self.arrays:
            host = buf = np.zeros((len(tiles), f1 - f0, ly, lx), np.float32)
        else:
            import torch

            host = torch.zeros((len(tiles), f1 - f0, ly, lx), dtype=torch.float32,
                               pin_memory=self.device.type == "cuda")
            buf = host.numpy()
        h, w = self.shape
        for i, tile in enumerate(tiles):
            ry, rx = tile.read
            vy, vx = min(ry.stop, h) - ry.start, min(rx.stop, w) - rx.start
            buf[i, :, :vy, :vx] = frames[f0:f1, ry.start:ry.start + vy, rx.start:rx.start + vx]
        return host

    def _to_device(self, host: torch.Tensor, tiles: Sequence[Tile], levels: torch.Tensor) -> torch.Tensor:
        """Photons (camera), normalized with the frames' ``levels`` (nf,), padded-frame pixels zeroed:
        ``(len(tiles), nf, C, Ly, Lx)``."""
        x = (self._normalized_array if self.arrays else self._normalized_tensor)(host, tiles, levels)
        h, w = self.shape
        for i, tile in enumerate(tiles):
            ry, rx = tile.read
            if ry.stop > h:
                x[i, ..., h - ry.start:, :] = 0
            if rx.stop > w:
                x[i, ..., w - rx.start:] = 0
        return x

    def _normalized_array(self, host: np.ndarray, tiles: Sequence[Tile], levels: np.ndarray) -> np.ndarray:
        """``_to_device``'s photons and normalization on arrays (``model.arrays``)."""
        cfg = self.net.config
        if self._maps is not None:  # each tile converts with its own pixels' calibration
            parts = []
            for i, tile in enumerate(tiles):
                maps = self._maps.crop(*tile.read)
                parts.append(model_arrays.normalize(cfg, self.camera.to_photons(host[i], maps), levels,
                                                    self.camera.read_variance(maps)))
            return np.stack(parts)
        if self.camera is None:
            return model_arrays.normalize(cfg, host, levels[None])
        return model_arrays.normalize(cfg, self.camera.to_photons(host), levels[None], self.camera.read_variance())

    def _normalized_tensor(self, host: torch.Tensor, tiles: Sequence[Tile], levels: torch.Tensor) -> torch.Tensor:
        """``_to_device``'s photons and normalization on the executor's device (``DecodeNet.normalize``)."""
        import torch

        x = host.to(self.device, non_blocking=True)
        # a model of a PSF that changes across the field reads each tile's place in the whole frame
        origins = None
        if getattr(getattr(self.net, "config", None), "field_shape", None) is not None:
            origins = torch.tensor([[t.read[0].start, t.read[1].start] for t in tiles], dtype=torch.float32,
                                   device=self.device)
        place = {} if origins is None else {"origin": origins[:, None]}
        if self._maps is not None:  # each tile converts with its own pixels' calibration
            parts = []
            for i, tile in enumerate(tiles):
                maps = self._maps.crop(*tile.read)
                photons = self.camera.to_photons(x[i], maps)
                parts.append(self.net.normalize(photons, levels, self.camera.read_variance(maps),
                                                **({} if origins is None else {"origin": origins[i]})))
            x = torch.stack(parts)
        else:
            read_var = None
            if self.camera is not None:
                x = self.camera.to_photons(x)
                read_var = self.camera.read_variance()
            x = self.net.normalize(x, levels[None], read_var, **place)
        return x

    def _compute(self, x: torch.Tensor, k: int, carry: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Network output ``(g, k, 10, Ly, Lx)`` for ``k`` windows of ``g`` tiles, and the features to carry."""
        if self.arrays:
            return self._compute_arrays(x, k, carry)
        import torch

        g, nf, c, ly, lx = x.shape
        with autocast(self.device, self._amp), self._cudnn():
            if self.config.reuse_features:
                feats = self._frame_features(x.reshape(g * nf, c, ly, lx).contiguous(memory_format=self._format))
                feats = feats.view(g, nf, *feats.shape[1:])
                if carry is not None:
                    feats = torch.cat([carry, feats], dim=1)
                win = [feats[:, j:j + k].reshape(g * k, *feats.shape[2:]) for j in range(3)]
                carry = feats[:, k:k + 2].clone()  # not a view: the rest of `feats` can be freed
            else:  # the DECODE way: each window's three frames go through the frame U-Net again
                windows = torch.stack([x[:, j:j + k] for j in range(3)], dim=2)  # (g, k, 3, C, Ly, Lx)
                feats = self._frame_features(
                    windows.reshape(g * k * 3, c, ly, lx).contiguous(memory_format=self._format))
                feats = feats.view(g * k, 3, *feats.shape[1:])
                win = [feats[:, j] for j in range(3)]
            del feats
            out = self._temporal(*win)
        return out.view(g, k, *out.shape[1:]), carry

    def _compute_arrays(self, x: np.ndarray, k: int, carry: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """``_compute`` on arrays (the runtime takes and returns them): the same windows, features and carry."""
        g, nf, c, ly, lx = x.shape
        if self.config.reuse_features:
            feats = self._frame_features(np.ascontiguousarray(x.reshape(g * nf, c, ly, lx)))
            feats = feats.reshape(g, nf, *feats.shape[1:])
            if carry is not None:
                feats = np.concatenate([carry, feats], axis=1)
            win = [np.ascontiguousarray(feats[:, j:j + k].reshape(g * k, *feats.shape[2:])) for j in range(3)]
            carry = feats[:, k:k + 2].copy()  # not a view of the runtime's buffer, which its next call reuses
        else:  # the DECODE way: each window's three frames go through the frame U-Net again
            windows = np.stack([x[:, j:j + k] for j in range(3)], axis=2)  # (g, k, 3, C, Ly, Lx)
            feats = self._frame_features(np.ascontiguousarray(windows.reshape(g * k * 3, c, ly, lx)))
            feats = feats.reshape(g * k, 3, *feats.shape[1:])
            win = [np.ascontiguousarray(feats[:, j]) for j in range(3)]
        del feats
        out = self._temporal(*win)
        return out.reshape(g, k, *out.shape[1:]), carry

    def _cudnn(self) -> contextlib.AbstractContextManager:
        """cuDNN's autotuning on for this executor's network calls on CUDA (``TileConfig.cudnn_benchmark``), put
        back as it was after each call; elsewhere nothing."""
        if self._kind.type != "cuda" or not self.config.cudnn_benchmark:
            return contextlib.nullcontext()
        return cudnn_benchmark()

    # ------------------------------------------------------------------ one unit of work
    def run_unit(self, windows: int | None = None, *, data: torch.Tensor | None = None) -> torch.Tensor:
        """The largest unit of work a block makes: ``windows`` windows (default ``batch_size``) of one group of
        tiles, on ``data`` (photons ``(g, windows + 2, Ly, Lx)``; default zeros). For planning and probing:
        under a FakeTensorMode it allocates nothing and shows what a real unit would allocate."""
        return self.unit(windows, data=data)()

    def unit(self, windows: int | None = None, *, data: torch.Tensor | None = None,
             carried: bool = False) -> Callable[[], torch.Tensor]:
        """``run_unit``'s unit, its input prepared once: each call runs the network on it again (for timing).

        ``carried``: the unit as every unit of a block after the first runs it when features are reused: two
        frames' features carried from the unit before (made here, once), ``windows`` new frames — what sets
        the speed of a long stack.
        """
        k = self.batch_size if windows is None else int(windows)
        run = max(1, min(k, self.batch_size))
        group = self._group(run)
        if self.arrays:
            return self._unit_arrays(run, group, data, carried)
        import torch

        if data is None:
            data = torch.zeros((group, run + 2, *self.grid.tile_shape), device=self.device)
        levels = torch.zeros(data.shape[1], device=self.device)
        with torch.inference_mode():
            x = self.net.normalize(data, levels[None])
            carry = None
            if carried and self.config.reuse_features:  # as a block's units carry them: computed under autocast
                with autocast(self.device, self._amp), self._cudnn():
                    carry = self._frame_features(x[:, :2].flatten(0, 1).contiguous(memory_format=self._format))
                carry, x = carry.view(x.shape[0], 2, *carry.shape[1:]).clone(), x[:, 2:]  # not a runtime's buffer

        def compute() -> torch.Tensor:
            with torch.inference_mode():
                return self._compute(x, run, carry)[0]

        return compute

    def _unit_arrays(self, run: int, group: int, data: Any, carried: bool) -> Callable[[], np.ndarray]:
        """``unit`` where the executor works on arrays (``data``: a tensor or an array)."""
        if data is None:
            data = np.zeros((group, run + 2, *self.grid.tile_shape), np.float32)
        data = data.numpy() if hasattr(data, "numpy") else np.asarray(data, np.float32)
        x = model_arrays.normalize(self.net.config, data, np.zeros((1, data.shape[1]), np.float32))
        carry = None
        if carried and self.config.reuse_features:  # as a block's units carry them
            carry = self._frame_features(np.ascontiguousarray(x[:, :2].reshape(-1, *x.shape[2:])))
            carry, x = carry.reshape(x.shape[0], 2, *carry.shape[1:]).copy(), x[:, 2:]  # not a runtime's buffer

        def compute() -> np.ndarray:
            return self._compute(x, run, carry)[0]

        return compute

    def _group(self, run: int) -> int:
        """Tiles per call for runs of ``run`` windows: at most ``batch_size + 2`` tile frames in one call, so
        short blocks (the end of a stack) batch several tiles without exceeding a full block's unit."""
        return max(1, min(len(self.grid), (self.batch_size + 2) // (run + 2)))
