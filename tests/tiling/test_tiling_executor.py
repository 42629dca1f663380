"""TiledExecutor: tiled == whole-frame output, exact block boundaries, feature reuse, OOM back-off, AMP."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
import torch
from numerics import SAME_MATH, channel_error

from decode_mem.errors import ConfigError
from decode_mem.io.camera import Camera
from decode_mem.model import DecodeNet, ModelConfig
from decode_mem.tiling import ArrayStack, DeviceMemoryError, TileConfig, TiledExecutor, block_length


@pytest.fixture(scope="module")
def tiny() -> DecodeNet:
    torch.manual_seed(0)
    return DecodeNet(ModelConfig.tiny()).eval()


def _stack(t: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    return (100 + 400 * np.random.default_rng(seed).random((t, h, w))).astype(np.float32)


def _whole(net: DecodeNet, stack: np.ndarray, read_var=None) -> np.ndarray:
    """The reference: the network on each full window (t-1, t, t+1), edge frames repeated."""
    t = len(stack)
    idx = np.clip(np.arange(t)[:, None] + np.arange(-1, 2)[None], 0, t - 1)
    with torch.no_grad():
        return net(torch.from_numpy(stack[idx]), read_var=read_var).numpy()


def _tiled(executor: TiledExecutor, stack: np.ndarray) -> tuple[np.ndarray, list]:
    """Stitch the executor's core outputs into full maps (NaN where nothing was written)."""
    out = np.full((len(stack), 10, *stack.shape[1:]), np.nan, np.float32)

    def consume(tile, frames, output):
        cy, cx = tile.core_in_keep
        out[frames, :, tile.core[0], tile.core[1]] = output[:, :, cy, cx].float().numpy()
        return tile, frames

    blocks = list(executor.run(ArrayStack(stack), consume))
    written = np.zeros((len(stack), *stack.shape[1:]), int)  # from the results kept, i.e. the final attempts
    for block in blocks:
        for tile, frames in block.results:
            written[frames[:, None, None], tile.core[0], tile.core[1]] += 1
    assert (written == 1).all(), "every output pixel belongs to exactly one tile core"
    assert np.isfinite(out).all(), "the network's output is finite"  # also where the executor is its own reference
    return out, blocks


def _scaled_maxdiff(net: DecodeNet, a: np.ndarray, b: np.ndarray) -> float:
    """The error relative to each output channel's scale (``numerics``: holds on any CPU)."""
    return channel_error(a, b)


@pytest.fixture(scope="module")
def nets(tiny: DecodeNet) -> dict[int, DecodeNet]:
    torch.manual_seed(1)
    return {2: tiny, 1: DecodeNet(ModelConfig.tiny(depth=1)).eval()}  # receptive field 44 / 18 px, factor 4 / 2


@pytest.mark.parametrize(("depth", "h", "w", "chunk", "batch", "grid"), [
    (2, 150, 150, 48, 8, (4, 4)),  # 2-D tiling; last tiles shifted back inside the frame
    (2, 130, 70, 24, 3, (6, 1)),  # odd sizes, not multiples of the factor
    (1, 61, 53, 8, 4, (8, 7)),  # factor 2, many seams
    (1, 37, 53, 5, 16, (1, 14)),  # chunk rounded down to 4
    (2, 37, 53, 512, 2, (1, 1)),  # frame smaller than the chunk
    (2, 20, 30, 512, 8, (1, 1)),
    (2, 3, 5, 512, 8, (1, 1)),  # smaller than the down-sampling factor's multiple
])
def test_tiled_output_equals_whole_frame(nets: dict[int, DecodeNet], depth: int, h: int, w: int, chunk: int,
                                         batch: int, grid: tuple[int, int]) -> None:
    net = nets[depth]
    stack = _stack(5, h, w, seed=h + w)
    ex = TiledExecutor(net, (h, w), TileConfig(chunk_size=chunk, batch_size=batch, block=2, margin=1))
    assert (len(ex.grid.rows), len(ex.grid.cols)) == grid
    out, blocks = _tiled(ex, stack)
    assert not np.isnan(out).any(), "some output pixel was never written"
    assert _scaled_maxdiff(net, out, _whole(net, stack)) <= SAME_MATH
    assert [b.t0 for b in blocks] == [0, 2, 4] and [b.n_frames for b in blocks] == [2, 2, 1]


def test_halo_smaller_than_receptive_field_is_not_exact(tiny: DecodeNet) -> None:
    """Control: the same tiling with a halo below the receptive field differs from the whole frame."""

    class ShortSighted:
        def __getattr__(self, name: str):
            return getattr(tiny, name)

        def receptive_field(self) -> int:
            return 4

    stack = _stack(2, 64, 64, seed=3)
    out, _ = _tiled(TiledExecutor(ShortSighted(), (64, 64), TileConfig(chunk_size=16, batch_size=4)), stack)
    assert _scaled_maxdiff(tiny, out, _whole(tiny, stack)) > 100 * SAME_MATH


def test_block_boundaries_keep_exact_temporal_context(tiny: DecodeNet) -> None:
    """Blocks of 3 frames over 10 frames: every window sees its true neighbours, edges repeat at the ends."""
    stack = _stack(10, 24, 28, seed=5)
    ex = TiledExecutor(tiny, (24, 28), TileConfig(chunk_size=512, batch_size=2, block=3))
    out, blocks = _tiled(ex, stack)
    assert [b.t0 for b in blocks] == [0, 3, 6, 9]
    assert _scaled_maxdiff(tiny, out, _whole(tiny, stack)) <= SAME_MATH
    # control: without the neighbours (each frame as its own context) the output differs
    solo = _whole(tiny, stack[:, None].repeat(3, 1).reshape(-1, 24, 28))[1::3]
    assert _scaled_maxdiff(tiny, out, solo) > 100 * SAME_MATH


class CountingNet:
    """Delegates to a network and counts the frames that go through the frame U-Net."""

    def __init__(self, net: DecodeNet) -> None:
        self._inner, self.frames = net, 0

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def frame_features(self, x: torch.Tensor) -> torch.Tensor:
        self.frames += x.shape[0]
        return self._inner.frame_features(x)


def test_feature_reuse_equals_recompute_with_a_third_of_the_work(tiny: DecodeNet) -> None:
    stack = _stack(12, 40, 36, seed=9)
    outs, counts = [], []
    for reuse in (True, False):
        net = CountingNet(tiny)
        cfg = TileConfig(chunk_size=16, batch_size=4, block=6, reuse_features=reuse)
        ex = TiledExecutor(net, (40, 36), cfg)
        outs.append(_tiled(ex, stack)[0])
        counts.append(net.frames / len(ex.grid))
    assert _scaled_maxdiff(tiny, outs[0], outs[1]) <= SAME_MATH
    assert _scaled_maxdiff(tiny, outs[0], _whole(tiny, stack)) <= SAME_MATH
    # per tile: reuse computes each frame once, plus the 2 context frames of each of the 2 blocks
    assert counts == [12 + 2 * 2, 3 * 12]


def test_a_carried_unit_is_a_blocks_steady_state(tiny: DecodeNet) -> None:
    """``unit(carried=True)`` — what ``auto`` times — computes the same windows as the block's first unit, from
    two carried frames' features and only ``k`` new frames per call (a block's later units)."""
    net = CountingNet(tiny)
    ex = TiledExecutor(net, (32, 32), TileConfig(chunk_size=32, batch_size=3))
    data = torch.from_numpy(_stack(5, 32, 32, seed=4)[None])  # one tile, k + 2 = 5 frames
    first = ex.run_unit(3, data=data)
    steady = ex.unit(3, data=data, carried=True)
    made = net.frames
    again = steady()
    assert torch.isfinite(first).all()  # the reference here is the executor's own first unit
    assert net.frames - made == 3  # only the new frames go through the frame U-Net
    assert _scaled_maxdiff(tiny, again.numpy(), first.numpy()) <= SAME_MATH


class FlakyNet(CountingNet):
    """Raises torch.OutOfMemoryError on chosen frame_features calls, or on tiles of more than ``max_px``."""

    def __init__(self, net: DecodeNet, fail_calls: set[int] = frozenset(), max_px: int | None = None) -> None:
        super().__init__(net)
        self.calls, self.fail_calls, self.max_px = 0, set(fail_calls), max_px

    def frame_features(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls in self.fail_calls or (self.max_px is not None and x.shape[-2] * x.shape[-1] > self.max_px):
            raise torch.OutOfMemoryError(f"injected: call {self.calls}, {tuple(x.shape)}")
        return super().frame_features(x)


def test_injected_oom_halves_the_batch_and_gives_identical_output(tiny: DecodeNet) -> None:
    stack = _stack(9, 120, 24, seed=11)
    cfg = TileConfig(chunk_size=8, batch_size=8, block=4)
    ref, _ = _tiled(TiledExecutor(tiny, (120, 24), cfg), stack)
    flaky = FlakyNet(tiny, fail_calls={2, 3})  # the second and third calls fail
    ex = TiledExecutor(flaky, (120, 24), cfg)
    out, blocks = _tiled(ex, stack)
    assert len(ex.grid) > 8
    # equal up to float rounding: a smaller batch may change the convolutions' summation order
    assert _scaled_maxdiff(tiny, out, ref) <= SAME_MATH
    assert [b.retries for b in blocks] == [2, 0, 0]
    assert [b.batch_size for b in blocks] == [2, 2, 2] and ex.batch_size == 2
    assert len(ex.backoffs) == 2 and "batch 8" in ex.backoffs[0] and "batch 4" in ex.backoffs[1]


def test_injected_oom_shrinks_the_chunk_when_the_batch_is_one(tiny: DecodeNet) -> None:
    stack = _stack(4, 200, 24, seed=12)
    cfg = TileConfig(chunk_size=64, batch_size=2, block=4)
    ex0 = TiledExecutor(tiny, (200, 24), cfg)
    ly, lx = ex0.grid.tile_shape
    flaky = FlakyNet(tiny, max_px=ly * lx - 1)  # any call with a tile of the planned size fails
    ex = TiledExecutor(flaky, (200, 24), cfg)
    out, blocks = _tiled(ex, stack)
    assert _scaled_maxdiff(tiny, out, _whole(tiny, stack)) <= SAME_MATH
    assert ex.batch_size == 1 and ex.grid.chunk == 32 and len(ex.grid) > len(ex0.grid)
    assert blocks[0].retries == 2 and blocks[0].chunk_size == 32


def test_persistent_oom_is_a_clear_error_after_bounded_retries(tiny: DecodeNet) -> None:
    flaky = FlakyNet(tiny, max_px=0)
    ex = TiledExecutor(flaky, (200, 24), TileConfig(chunk_size=64, batch_size=8, max_retries=3))
    with pytest.raises(DeviceMemoryError, match=r"out of memory on cpu .* after 3 back-off"):
        _tiled(ex, _stack(3, 200, 24))
    assert flaky.calls == 4  # batch 8, 4, 2, 1


def test_other_runtime_errors_are_not_retried(tiny: DecodeNet) -> None:
    class Broken(CountingNet):
        def frame_features(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("shape mismatch, not memory")

    ex = TiledExecutor(Broken(tiny), (16, 16), TileConfig(chunk_size=16))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        _tiled(ex, _stack(2, 16, 16))
    assert ex.backoffs == []


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_cpu_amp_path_runs_and_stays_close(tiny: DecodeNet, amp: str) -> None:
    stack = _stack(3, 40, 36, seed=2)
    ref = _whole(tiny, stack)
    out, _ = _tiled(TiledExecutor(tiny, (40, 36), TileConfig(chunk_size=16, batch_size=4, amp=amp)), stack)
    diff = _scaled_maxdiff(tiny, out, ref)
    assert np.isfinite(out).all() and 0 < diff < 0.2  # autocast was on (not bit-equal) and the result is sane


def test_camera_converts_raw_frames_to_photons_on_the_device(tiny: DecodeNet) -> None:
    camera = Camera.emccd()
    photons = _stack(3, 24, 24, seed=4)
    adu = np.round(camera.to_adu(photons)).astype(np.uint16)
    cfg = TileConfig(chunk_size=8, batch_size=4)
    out, _ = _tiled(TiledExecutor(tiny, (24, 24), cfg, camera=camera), adu)
    ref = _whole(tiny, camera.to_photons(adu).astype(np.float32), camera.read_variance_photons)
    assert _scaled_maxdiff(tiny, out, ref) <= SAME_MATH


def test_array_stack_blocks_repeat_edge_frames_and_shapes_are_checked(tiny: DecodeNet) -> None:
    frames = np.arange(5)[:, None, None] * np.ones((1, 2, 3))
    blocks = list(ArrayStack(frames).blocks(2, context=1))
    assert [t0 for t0, _ in blocks] == [0, 2, 4]
    assert [list(b[:, 0, 0]) for _, b in blocks] == [[0, 0, 1, 2], [1, 2, 3, 4], [3, 4, 4]]
    ex = TiledExecutor(tiny, (2, 3), TileConfig(chunk_size=8))
    with pytest.raises(ConfigError, match="planned for 2x3"):
        next(ex.run(ArrayStack(np.zeros((2, 4, 4))), lambda *a: None))
    with pytest.raises(ConfigError, match=r"\(T, H, W\)"):
        ArrayStack(np.zeros((4, 4)))
    with pytest.raises(ConfigError, match="amp"):
        TileConfig(amp="fp8")
    with pytest.raises(ConfigError, match="chunk_size"):
        TileConfig(chunk_size=0)


@pytest.mark.gpu
def test_cuda_tiled_output_equals_whole_frame_and_amp_runs(tiny: DecodeNet) -> None:
    """On CUDA (pinned staging, non_blocking copies, staging thread): tiled == whole frame in fp32, TF32 off."""
    import copy

    net = copy.deepcopy(tiny).cuda()
    stack = _stack(5, 150, 150, seed=21)
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        ex = TiledExecutor(net, (150, 150), TileConfig(chunk_size=48, batch_size=4, block=2, margin=1),
                           device="cuda")
        out, _ = _tiled_cuda(ex, stack)
        ref = _whole(tiny, stack)  # on the CPU
        # cuDNN may pick other algorithms per tile shape: allow float noise a little above the CPU test's
        assert _scaled_maxdiff(tiny, out, ref) <= 1e-4
        bf16 = TiledExecutor(net, (150, 150), TileConfig(chunk_size=48, batch_size=2, amp="bf16"),  # sizes: plan
                             device="cuda")
        out16, _ = _tiled_cuda(bf16, stack)
        assert np.isfinite(out16).all() and _scaled_maxdiff(tiny, out16, ref) < 0.2
    finally:
        torch.backends.cudnn.allow_tf32 = tf32


@pytest.mark.gpu
def test_cuda_out_of_memory_on_a_full_device_backs_off_and_finishes(tiny: DecodeNet) -> None:
    """A real CUDA out-of-memory error: the device is filled until only half of the first unit's peak is free,
    then a stack is run with sizes that cannot fit there. The executor backs off (smaller batch, then tiles),
    finishes, and gives the output of the same run on an empty device."""
    import copy

    from decode_mem.footprint import peak_bytes

    net = copy.deepcopy(tiny).cuda()
    stack = _stack(18, 512, 512, seed=5)
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    config = TileConfig(chunk_size=512, batch_size=16, block=16, margin=1)
    hog: list[torch.Tensor] = []
    try:
        ref, _ = _tiled_cuda(TiledExecutor(net, (512, 512), config, device="cuda"), stack)
        need = peak_bytes(lambda: TiledExecutor(net, (512, 512), config, device="cuda").run_unit(),
                          torch.device("cuda"))
        torch.cuda.empty_cache()
        step = 256 * 2**20
        while True:  # fill the device in steps, then with smaller pieces, until half the unit's peak is left
            free, _ = torch.cuda.mem_get_info()
            if free <= need // 2:
                break
            size = step if free - step > need // 2 else max(2**20, free - need // 2)
            try:
                hog.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
            except torch.OutOfMemoryError:
                break
        ex = TiledExecutor(net, (512, 512), config, device="cuda")
        out, _ = _tiled_cuda(ex, stack)
        assert ex.backoffs, "the full device did not make the run back off"
        assert ex.batch_size < 16 or ex.grid.chunk < 512
        assert _scaled_maxdiff(tiny, out, ref) <= 1e-4  # other sizes, the same result
    finally:
        hog.clear()
        torch.cuda.empty_cache()
        torch.backends.cudnn.allow_tf32 = tf32


def _tiled_cuda(executor: TiledExecutor, stack: np.ndarray) -> tuple[np.ndarray, list]:
    out = np.full((len(stack), 10, *stack.shape[1:]), np.nan, np.float32)

    def consume(tile, frames, output):
        assert output.is_cuda
        cy, cx = tile.core_in_keep
        out[frames, :, tile.core[0], tile.core[1]] = output[:, :, cy, cx].float().cpu().numpy()

    blocks = list(executor.run(ArrayStack(stack), consume))
    assert not np.isnan(out).any()
    return out, blocks


def test_camera_maps_convert_each_tile_with_its_own_pixels(tiny: DecodeNet, tmp_path) -> None:
    """With sCMOS maps every pixel is converted with its own offset and gain and tells the network its own
    read-noise variance; tiled == the whole frame converted the same way."""
    h, w = 30, 26
    rng = np.random.default_rng(11)
    offset = (100 + 5 * rng.standard_normal((h, w))).astype(np.float32)
    gain = (0.5 * (1 + 0.1 * rng.standard_normal((h, w)))).astype(np.float32)
    variance = (rng.gamma(2.0, 2.0, (h, w))).astype(np.float32)
    for name, a in (("offset", offset), ("gain", gain), ("var", variance)):
        np.save(tmp_path / f"{name}.npy", a)
    camera = Camera.scmos(offset_map=str(tmp_path / "offset.npy"), e_per_adu_map=str(tmp_path / "gain.npy"),
                          variance_map=str(tmp_path / "var.npy"))
    adu = (offset + rng.poisson(300, (4, h, w)) / gain).astype(np.float32).round().astype(np.uint16)
    out, _ = _tiled(TiledExecutor(tiny, (h, w), TileConfig(chunk_size=8, batch_size=3), camera=camera), adu)
    maps = camera.load_maps((h, w))
    photons = camera.to_photons(adu, maps).astype(np.float32)
    read_var = torch.from_numpy(camera.read_variance(maps))
    ref = _whole(tiny, photons, read_var[None])
    assert _scaled_maxdiff(tiny, out, ref) <= SAME_MATH
    # the maps matter: converting with the scalars gives another output
    scalar = _whole(tiny, camera.without_maps().to_photons(adu).astype(np.float32), camera.read_variance_photons)
    assert _scaled_maxdiff(tiny, out, scalar) > 100 * SAME_MATH


def test_camera_map_of_the_wrong_shape_is_a_clear_error(tiny: DecodeNet, tmp_path) -> None:
    np.save(tmp_path / "offset.npy", np.zeros((10, 12), np.float32))
    camera = Camera.scmos(offset_map=str(tmp_path / "offset.npy"))
    with pytest.raises(ConfigError, match=r"offset\.npy: camera map is 10x12 px, the frames are 30x26 px"):
        TiledExecutor(tiny, (30, 26), TileConfig(chunk_size=8), camera=camera)


def test_streams_give_one_streams_output_in_frame_order_from_their_own_threads(tiny: DecodeNet,
                                                                                torch_threads) -> None:
    """``streams=3``: blocks computed at once in worker threads on a share of torch's threads, yielded in frame
    order; the last block alone in the calling thread on all of them; the output is one stream's (blocks are
    independent), and torch's thread setting is what it was."""
    stack = _stack(11, 40, 56, seed=21)
    cfg = TileConfig(chunk_size=16, batch_size=2, block=3)
    one, one_blocks = _tiled(TiledExecutor(tiny, (40, 56), cfg), stack)
    threads_before = torch_threads(6)  # a share of 2 each: with the tests' 1-thread pin every count would be 1
    seen: dict[int, set[tuple[str, int]]] = {}

    def consume(tile, frames, out) -> None:
        for t in frames:
            seen.setdefault(int(t), set()).add((threading.current_thread().name, torch.get_num_threads()))

    ex = TiledExecutor(tiny, (40, 56), dataclasses.replace(cfg, streams=3))
    blocks = list(ex.run(ArrayStack(stack), consume))
    three, three_blocks = _tiled(ex, stack)
    assert [b.t0 for b in three_blocks] == [b.t0 for b in one_blocks] == [0, 3, 6, 9]
    assert [b.n_frames for b in blocks] == [3, 3, 3, 2]
    share = threads_before // 3
    assert sorted(seen) == list(range(11))
    for t in range(9):
        ((name, threads),) = seen[t]
        assert name.startswith("decode_mem-stream") and threads == share
    assert seen[9] == seen[10] == {(threading.current_thread().name, threads_before)}  # the last block
    assert _scaled_maxdiff(tiny, three, one) <= SAME_MATH
    assert torch.get_num_threads() == threads_before


def test_an_oom_in_a_stream_backs_off_as_one_stream_would(tiny: DecodeNet) -> None:
    """Every call with the planned tiles fails, in both streams at once: the sizes shrink as often as in one
    stream (the second failed block is redone with the shrunk sizes, not shrunk again) and the output is exact."""
    stack = _stack(9, 120, 24, seed=11)
    cfg = TileConfig(chunk_size=64, batch_size=2, block=3)
    ly, lx = TiledExecutor(tiny, (120, 24), cfg).grid.tile_shape
    one = TiledExecutor(FlakyNet(tiny, max_px=ly * lx - 1), (120, 24), cfg)
    ref, _ = _tiled(one, stack)
    two = TiledExecutor(FlakyNet(tiny, max_px=ly * lx - 1), (120, 24), dataclasses.replace(cfg, streams=2))
    out, blocks = _tiled(two, stack)
    assert len(two.backoffs) == len(one.backoffs) == 2  # batch 2 -> 1, then smaller tiles
    assert [b.retries for b in blocks] == [2, 0, 0]
    assert (two.batch_size, two.grid.chunk) == (one.batch_size, one.grid.chunk) == (1, 16)
    assert _scaled_maxdiff(tiny, out, ref) <= SAME_MATH
    assert _scaled_maxdiff(tiny, out, _whole(tiny, stack)) <= SAME_MATH


def test_streams_must_be_a_positive_integer() -> None:
    with pytest.raises(ConfigError, match="streams must be a positive integer"):
        TileConfig(streams=0)


def test_auto_blocks_give_every_stream_several_blocks(tiny: DecodeNet) -> None:
    """With streams, an 'auto' block is short enough for ``STREAM_ROUNDS`` blocks per stream (the last block runs
    alone), but not shorter than ``STREAM_BLOCK_MIN``; sizes given are kept."""
    from decode_mem.tiling.blocks import STREAM_BLOCK_MIN, STREAM_ROUNDS

    one = block_length((400, 256, 256), 2)
    assert one == 256  # about BLOCK_BYTES of raw frames, at most 256
    assert block_length((400, 256, 256), 2, streams=2) == -(-400 // (STREAM_ROUNDS * 2)) < one
    assert block_length((40, 256, 256), 2, streams=2) == STREAM_BLOCK_MIN
    assert block_length((12, 2048, 2048), 2, streams=2) == block_length((2048, 2048), 2)  # never longer
    assert block_length((400, 256, 256), 2, block=32, streams=2) == 32
    ex = TiledExecutor(tiny, (24, 24), TileConfig(chunk_size=24, block="auto", streams=2))
    blocks = list(ex.run(ArrayStack(_stack(160, 24, 24, seed=3)), lambda tile, frames, out: None))
    assert [b.n_frames for b in blocks] == [20] * 8


def test_auto_blocks_on_a_cpu_are_short_in_pixels() -> None:
    """``max_pixels`` (a run on a CPU: ``CPU_BLOCK_PIXELS``) caps an 'auto' block at about that many pixels, never
    under ``STREAM_BLOCK_MIN`` frames and never longer than without it; sizes given are kept."""
    from decode_mem.tiling import CPU_BLOCK_PIXELS
    from decode_mem.tiling.blocks import STREAM_BLOCK_MIN

    assert block_length((5000, 256, 256), 2, max_pixels=CPU_BLOCK_PIXELS) == CPU_BLOCK_PIXELS // 256**2 == 32
    assert block_length((5000, 128, 128), 2, max_pixels=CPU_BLOCK_PIXELS) == 128
    assert block_length((5000, 64, 64), 2, max_pixels=CPU_BLOCK_PIXELS) == 256  # BLOCK_RANGE's top
    assert block_length((5000, 1024, 1024), 2, max_pixels=CPU_BLOCK_PIXELS) == STREAM_BLOCK_MIN
    assert block_length((5000, 2048, 2048), 2, max_pixels=CPU_BLOCK_PIXELS) == block_length((2048, 2048), 2) == 8
    assert block_length((5000, 256, 256), 2, block=200, max_pixels=CPU_BLOCK_PIXELS) == 200
