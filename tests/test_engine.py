"""predict_stack / process_large_image: tiled emitter tables equal the whole-frame tables, seams included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch
from numerics import SAME_MATH

from decode_mem.errors import ConfigError
from decode_mem.infer.predict import predict_stack, process_large_image
from decode_mem.io.camera import Camera
from decode_mem.io.stack import open_stack
from decode_mem.io.table import EmitterTable
from decode_mem.model import DecodeNet, ModelConfig
from decode_mem.model.checkpoint import TrainedModel
from decode_mem.postprocess import PostprocessConfig, output_to_emitters
from decode_mem.tiling import BlockResult

PP = PostprocessConfig(threshold=0.5, raw_threshold=0.1, split_threshold=0.6)
_CFG = ModelConfig.tiny()
UNITS = {"photons": _CFG.photon_scale, "sigma_photons": _CFG.photon_scale, "z": _CFG.z_scale,
         "sigma_z": _CFG.z_scale, "bg": _CFG.bg_scale}  # as in ModelConfig.output_scales()


@pytest.fixture(scope="module")
def tiny() -> DecodeNet:
    torch.manual_seed(0)
    return DecodeNet(ModelConfig.tiny()).eval()


def _dense(depth: int) -> DecodeNet:
    """Random weights with a p head that detects something every few pixels (seams included)."""
    torch.manual_seed(0)
    net = DecodeNet(ModelConfig.tiny(depth=depth, p_bias_init=-2.0)).eval()
    with torch.no_grad():
        net.heads["p"][-1].weight.mul_(5.0)  # p-logits in about [-10, 3]: ~70 detections in a 37 x 53 frame
    return net


@pytest.fixture(scope="module")
def dense() -> DecodeNet:
    return _dense(2)


@pytest.fixture(scope="module")
def dense_shallow() -> DecodeNet:
    return _dense(1)  # receptive field 18 px: a 2-D grid of tiles fits in small frames


def _frames(t: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    return (100 + 400 * np.random.default_rng(seed).random((t, h, w))).astype(np.float32)


def _windows(stack: np.ndarray) -> np.ndarray:
    t = len(stack)
    return stack[np.clip(np.arange(t)[:, None] + np.arange(-1, 2)[None], 0, t - 1)]


def _whole_table(net: object, stack: np.ndarray, read_var: float | None = None) -> EmitterTable:
    with torch.no_grad():
        out = (net(torch.from_numpy(_windows(stack)), read_var=read_var) if isinstance(net, DecodeNet)
               else net.forward_whole(stack))
    return output_to_emitters(out, 0, config=PP)


def _canonical(table: EmitterTable) -> dict[str, np.ndarray]:
    order = np.lexsort((table["x"], table["y"], table["frame"]))
    return {name: table[name][order] for name in table.names}


def _assert_tables_equal(a: EmitterTable, b: EmitterTable, *, exact: bool) -> None:
    if not exact:  # rounding can move a summed probability across the threshold only within a hair of it
        a, b = (t.select(np.abs(t["prob"] - PP.threshold) > 10 * SAME_MATH) for t in (a, b))
    ca, cb = _canonical(a), _canonical(b)
    assert a.names == b.names and len(a) == len(b)
    np.testing.assert_array_equal(ca["frame"], cb["frame"])
    for name in a.names:
        if exact:
            np.testing.assert_array_equal(ca[name], cb[name], err_msg=name)
        else:  # float rounding of the network output in another summation order: relative to each column's unit
            np.testing.assert_allclose(ca[name], cb[name], rtol=1e-6, atol=SAME_MATH * UNITS.get(name, 1.0),
                                       err_msg=name)


class RenderNet:
    """A pointwise 'network' (receptive field 0): the middle frame *is* the p-logit map, the other channels
    are pointwise functions of the window. Its tiled output is bit-identical to the whole-frame output, so
    emitter tables must match exactly, wherever the emitters sit."""

    downsample_factor = 4

    def receptive_field(self) -> int:
        return 0

    def level_stride(self, height: int, width: int) -> int:
        return 1

    def level_from_sample(self, photons: torch.Tensor) -> torch.Tensor:
        return photons.new_zeros(photons.shape[:-2])

    def normalize(self, x: torch.Tensor, level: object = None, read_var: object = None) -> torch.Tensor:
        return x.unsqueeze(-3)

    def frame_features(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def temporal(self, prev: torch.Tensor, mid: torch.Tensor, nxt: torch.Tensor) -> torch.Tensor:
        v, d = mid[:, :1], (nxt - prev)[:, :1]
        # offsets within +-0.25 px, so that round(x), round(y) is the detected pixel
        return torch.cat([v, 1000 + 100 * v, 0.25 * torch.tanh(d), 0.25 * torch.tanh(v + d), 10 * d, 50 + v,
                          0.5 + 0 * v, 0.6 + 0 * v, 40 + d, 20 + 0 * v], dim=1)

    def forward_whole(self, stack: np.ndarray) -> torch.Tensor:
        w = torch.from_numpy(_windows(stack))
        return self.temporal(w[:, :1], w[:, 1:2], w[:, 2:])

    def parameters(self):
        return iter(())

    def to(self, device: object) -> RenderNet:
        return self

    def eval(self) -> RenderNet:
        return self


def _seam_logits(t: int, h: int, w: int, chunk: int) -> tuple[np.ndarray, set]:
    """p-logit frames: low background, emitters (logit 3 with a shoulder) on and next to every seam."""
    rng = np.random.default_rng(1)
    logits = (-6 + rng.random((t, h, w))).astype(np.float32)
    seams = list(range(chunk, max(h, w), chunk))
    placed = set()
    for f in range(t):
        for k, s in enumerate(seams):
            spots = [(s - 1, 3 + 5 * k + f), (s, 20 + 3 * k), (s - 1, s), (2 + 7 * f + k, s), (9 + k, s - 1)]
            spots += [(s, 30 + f), (s - 1, 30 + f)]  # an adjacent pair straddling the seam: the split rule
            for y, x in spots:
                if y < h and x < w:
                    for dy, dx in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                        if 0 <= y + dy < h and 0 <= x + dx < w:
                            logits[f, y + dy, x + dx] = max(logits[f, y + dy, x + dx], -0.5)
                    logits[f, y, x] = 3.0
                    placed.add((f, y, x))
    return logits, placed


def test_emitters_on_tile_seams_are_neither_lost_nor_duplicated() -> None:
    net, chunk = RenderNet(), 8
    logits, placed = _seam_logits(4, 37, 53, chunk)
    tiled = EmitterTable.concat(predict_stack(logits, net, amp="off", chunk_size=chunk, batch_size=3, block=2,
                                              postprocess=PP))
    whole = _whole_table(net, logits)
    _assert_tables_equal(tiled, whole, exact=True)
    detected = set(zip(tiled["frame"].tolist(), np.round(tiled["y"]).astype(int).tolist(),
                       np.round(tiled["x"]).astype(int).tolist(), strict=True))
    assert len(placed) > 60 and placed <= detected  # every emitter on a seam is found, once (tables are equal)


@pytest.mark.parametrize(("depth", "h", "w", "chunk", "n_tiles"), [
    (1, 61, 53, 8, 56), (2, 130, 70, 16, 9), (2, 40, 36, 512, 1)])
def test_predict_stack_equals_whole_frame_pipeline(dense: DecodeNet, dense_shallow: DecodeNet, depth: int, h: int,
                                                   w: int, chunk: int, n_tiles: int) -> None:
    net = dense if depth == 2 else dense_shallow
    stack = _frames(5, h, w, seed=h)
    seen: list[BlockResult] = []
    tables = list(predict_stack(stack, net, amp="off", chunk_size=chunk, batch_size=4, block=2, postprocess=PP,
                                on_block=seen.append))
    assert [b.t0 for b in seen] == [0, 2, 4] and len(tables) == 3
    assert len(seen[0].results) == n_tiles  # candidates per (tile, run); one run of 2 windows per block
    for table, block in zip(tables, seen, strict=True):  # per block, frames in order, only the block's frames
        assert np.all(np.diff(table["frame"]) >= 0)
        assert set(table["frame"]) <= set(range(block.t0, block.t0 + block.n_frames))
    whole = _whole_table(net, stack)
    assert len(whole) > 20  # the comparison means something
    _assert_tables_equal(EmitterTable.concat(tables), whole, exact=False)


def test_injected_oom_gives_the_same_emitter_table(dense: DecodeNet) -> None:
    class Flaky:
        def __init__(self) -> None:
            self.calls = 0

        def __getattr__(self, name: str):
            return getattr(dense, name)

        def frame_features(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            if self.calls in (2, 3, 4):
                raise torch.OutOfMemoryError("injected")
            return dense.frame_features(x)

    stack = _frames(6, 130, 40, seed=3)
    kw = dict(chunk_size=16, batch_size=4, block=3, postprocess=PP)
    ref = EmitterTable.concat(predict_stack(stack, dense, **kw))
    seen: list[BlockResult] = []
    got = EmitterTable.concat(predict_stack(stack, Flaky(), on_block=seen.append, **kw))
    assert [b.retries for b in seen] == [3, 0] and seen[-1].batch_size == 1 and seen[-1].chunk_size < 16
    assert len(ref) > 10
    _assert_tables_equal(got, ref, exact=False)


def test_trained_model_reads_raw_adu_from_a_tiff_stack(dense: DecodeNet, tmp_path: Path) -> None:
    camera = Camera.emccd()
    photons = _frames(5, 40, 44, seed=8)
    adu = np.round(camera.to_adu(photons)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "movie.tif", adu)
    model = TrainedModel(net=dense, camera=camera, simulation={}, receptive_field=dense.receptive_field(), step=0,
                         path=tmp_path / "model.pt", envelope={})
    with open_stack(tmp_path / "movie.tif") as stack:
        tiled = EmitterTable.concat(predict_stack(stack, model, amp="off", chunk_size=8, batch_size=8, postprocess=PP))
    whole = _whole_table(dense, camera.to_photons(adu).astype(np.float32), camera.read_variance_photons)
    _assert_tables_equal(tiled, whole, exact=False)


def test_process_large_image_returns_the_whole_output_map(tiny: DecodeNet) -> None:
    scales = torch.tensor(tiny.config.output_scales()).view(-1, 1, 1)
    image = _frames(3, 130, 70, seed=4)
    with torch.no_grad():
        ref_window = tiny(torch.from_numpy(image[None]))[0]
        ref_single = tiny(torch.from_numpy(image[1][None, None].repeat(3, 1)))[0]
    window = process_large_image(image, tiny, 16, amp="off", batch_size=4)
    single = process_large_image(torch.from_numpy(image[1]), tiny, amp="off", chunk_size=24)
    assert isinstance(window, np.ndarray) and window.shape == (10, 130, 70)
    assert isinstance(single, torch.Tensor) and single.shape == (10, 130, 70)
    assert float(((torch.from_numpy(window) - ref_window) / scales).abs().max()) <= 1e-5
    assert float(((single - ref_single) / scales).abs().max()) <= 1e-5
    with pytest.raises(ConfigError, match=r"\(3, H, W\) window"):
        process_large_image(image[:2], tiny, amp="off")


def test_cpu_bf16_path_runs(dense: DecodeNet) -> None:
    stack = _frames(3, 40, 36, seed=6)
    fp32 = process_large_image(stack, dense, 16, amp="off")
    bf16 = process_large_image(stack, dense, 16, amp="bf16")
    assert np.isfinite(bf16).all() and not np.array_equal(fp32, bf16)
    assert np.abs(bf16[0] - fp32[0]).max() < 1.0  # p-logits of a bf16 pass: close, not equal
    tables = list(predict_stack(stack, dense, chunk_size=16, amp="bf16", postprocess=PP))
    assert len(tables) == 1 and len(tables[0]) > 0


def test_setup_errors_are_raised_before_iteration(dense: DecodeNet) -> None:
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            predict_stack(_frames(2, 8, 8), dense, amp="off", device="cuda")
    with pytest.raises(ConfigError, match="amp"):
        predict_stack(_frames(2, 8, 8), dense, amp="int8")
