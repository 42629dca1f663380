"""A folded network (``ModelConfig.unshuffle``: pixel blocks folded into channels before each U-Net, unfolded after):
its settings, the tile exactness and receptive field every network keeps, a checkpoint's round trip, and the CPU
runtimes' conversion of it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from numerics import SAME_MATH, channel_error

from decode_mem.errors import ConfigError
from decode_mem.model import DecodeNet, ModelConfig
from decode_mem.model import engine as engines
from decode_mem.model.flops import stream_flops
from decode_mem.tiling import ArrayStack, TileConfig, TiledExecutor

FOLDED = {"depth": 1, "features": 8, "inter_features": 4, "unshuffle": 2}


@pytest.fixture(scope="module")
def folded() -> DecodeNet:
    torch.manual_seed(2)
    net = DecodeNet(ModelConfig(**FOLDED, use_z=False)).eval()
    with torch.no_grad():  # weights far from the initialization's, so that every output channel varies
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return net


def _stack(t: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    return (100 + 400 * np.random.default_rng(seed).random((t, h, w))).astype(np.float32)


def test_the_setting_is_checked_saved_only_where_it_folds_and_sets_the_tile_multiple() -> None:
    for bad in (0, 3, 2.0, "2"):
        with pytest.raises(ConfigError, match="unshuffle"):
            ModelConfig(unshuffle=bad)
    assert "unshuffle" not in ModelConfig().to_dict()  # checkpoints of unfolded models stay as they were
    cfg = ModelConfig(**FOLDED)
    assert cfg.to_dict()["unshuffle"] == 2 and ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.downsample_factor == 4 and ModelConfig(depth=2, unshuffle=4).downsample_factor == 16
    net = DecodeNet(cfg)
    assert net.frame_unet.encoders[0][0].in_channels == 4 * cfg.input_channels  # 2 x 2 blocks folded
    assert net.heads["mean"][-1].out_channels == 4 * 4


def test_the_features_stay_folded_and_the_output_has_the_frames_size(folded: DecodeNet) -> None:
    x = torch.rand(2, 3, 37, 45) * 300 + 100
    with torch.no_grad():
        x_norm = folded.pad(folded.normalize(x))
        feats = folded.frame_features(x_norm[:, 1])
        out = folded(x)
        # the temporal part on folded features is the unfolded network's on unfolded ones: channel (frame, c, block
        # pixel) either way, so the features are those of the frames' pixels, 2 x 2 blocks side by side
        unfolded = torch.nn.functional.pixel_shuffle(feats, 2)
    assert folded.config.feature_channels == 16 and feats.shape == (2, 16, 20, 24)
    assert unfolded.shape == (2, 4, 40, 48) and out.shape == (2, 10, 37, 45)
    # folding changes where the work is, not the work per pixel much: fewer FLOPs than an unfolded network with
    # the folded width (16 per-frame features)
    assert 0 < stream_flops(folded, 64) < stream_flops(DecodeNet(ModelConfig(depth=1, features=8,
                                                                              inter_features=16)), 64)


@pytest.mark.parametrize(("h", "w", "chunk"), [(150, 150, 48), (201, 93, 24), (37, 53, 512)])
def test_tiled_output_equals_whole_frame(folded: DecodeNet, h: int, w: int, chunk: int) -> None:
    stack = _stack(4, h, w, seed=h + w)
    idx = np.clip(np.arange(4)[:, None] + np.arange(-1, 2)[None], 0, 3)
    with torch.no_grad():
        whole = folded(torch.from_numpy(stack[idx])).numpy()
    out = np.full_like(whole, np.nan)

    def consume(tile, frames, output):
        cy, cx = tile.core_in_keep
        out[frames, :, tile.core[0], tile.core[1]] = output[:, :, cy, cx].float().numpy()

    ex = TiledExecutor(folded, (h, w), TileConfig(chunk_size=chunk, batch_size=4, block=2, margin=1))
    for _ in ex.run(ArrayStack(stack), consume):
        pass
    assert not np.isnan(out).any()
    assert channel_error(out, whole) <= SAME_MATH
    assert (len(ex.grid.rows) * len(ex.grid.cols) > 1) == (chunk < 100)  # several tiles: their halos mattered


def test_the_receptive_field_bounds_an_impulse_at_every_place_in_a_block(folded: DecodeNet) -> None:
    rf = folded.receptive_field()
    size = 2 * rf + 24
    x = torch.from_numpy(_stack(1, size, size, seed=5))[:, None].repeat(1, 3, 1, 1)
    level = folded.frame_level(x)
    with torch.no_grad():
        base = folded(x, level=level)
        reached = 0
        for a in range(folded.downsample_factor):
            r0, c0 = size // 2 + a, size // 2 - a
            x2 = x.clone()
            x2[0, 1, r0, c0] += 1000.0
            changed = (folded(x2, level=level) != base).any(dim=1)[0]
            rows, cols = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
            dist = torch.maximum((rows - r0).abs(), (cols - c0).abs())
            assert not changed[dist > rf].any(), "an output beyond the receptive field changed"
            assert changed[dist <= 1].all(), "outputs next to the impulse did not change"
            reached = max(reached, int(dist[changed].max()))
    assert reached >= rf - folded.downsample_factor


def test_a_checkpoint_of_a_folded_network_loads_as_it_was_saved(folded: DecodeNet, tmp_path) -> None:
    from decode_mem.io.camera import Camera
    from decode_mem.model.checkpoint import load_model, save_checkpoint
    from decode_mem.model.convert import network_itself
    from decode_mem.simulate.config import SimulationConfig

    path = save_checkpoint(tmp_path / "folded.pt", net=folded, camera=Camera.emccd(),
                           simulation=SimulationConfig().to_dict(), step=1)
    x = torch.rand(1, 3, 24, 32) * 300 + 100
    for _ in range(2):  # the second load may be a repeat run's stand-in (``model.trained.remembered_model``)
        model = load_model(str(path))
        assert model.receptive_field == folded.receptive_field() and model.net.downsample_factor == 4
        back = network_itself(model.net).eval()
        assert back.config == folded.config
        with torch.no_grad():
            assert torch.equal(back(x), folded(x))


@pytest.mark.parametrize("name", ["openvino", "onnxruntime"])
def test_each_runtime_converts_a_folded_network(name: str, folded: DecodeNet) -> None:
    if not engines.installed(name):
        pytest.skip(f"{name} not installed (the optional 'cpu' extra: pip install -e \".[cpu]\")")
    engine = engines.load_engine(name, folded, threads=1)
    x = torch.rand(3, folded.config.input_channels, 32, 40)
    with torch.no_grad():
        ref_f = folded.frame_features(x)
        ref = folded.temporal(ref_f[0:1], ref_f[1:2], ref_f[2:3])
    got_f = torch.as_tensor(np.asarray(engine.frame_features(x)))
    got = torch.as_tensor(np.asarray(engine.temporal(got_f[0:1], got_f[1:2], got_f[2:3])))
    assert float((got_f - ref_f).abs().max()) <= 1e-3
    assert channel_error(got, ref) <= SAME_MATH  # fp32 both: the same math in another order
