"""A model that knows its place in the field: the coordinate input is exact under tiling (tiled == whole), it is
what the network sees of the place, and training crops carry their own place."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from numerics import SAME_MATH, channel_error

from decode_mem.errors import ConfigError
from decode_mem.model import DecodeNet, ModelConfig
from decode_mem.tiling import ArrayStack, TileConfig, TiledExecutor
from decode_mem.train.chunking import chunk_batch


def _net(shape: tuple[int, int], depth: int = 2) -> DecodeNet:
    torch.manual_seed(4)
    net = DecodeNet(ModelConfig.tiny(depth=depth, field_shape=shape)).eval()
    with torch.no_grad():  # the coordinate channels' weights large enough that the place shows in the output
        first = next(m for m in net.frame_unet.modules() if isinstance(m, torch.nn.Conv2d))
        first.weight[:, -2:] *= 20
    return net


def _stack(t: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    return (100 + 400 * np.random.default_rng(seed).random((t, h, w))).astype(np.float32)


def _whole(net: DecodeNet, stack: np.ndarray) -> np.ndarray:
    t = len(stack)
    idx = np.clip(np.arange(t)[:, None] + np.arange(-1, 2)[None], 0, t - 1)
    with torch.no_grad():
        return net(torch.from_numpy(stack[idx])).numpy()


def _tiled(net, stack: np.ndarray, chunk: int, batch: int) -> np.ndarray:
    out = np.full((len(stack), 10, *stack.shape[1:]), np.nan, np.float32)

    def consume(tile, frames, output):
        cy, cx = tile.core_in_keep
        out[frames, :, tile.core[0], tile.core[1]] = output[:, :, cy, cx].float().numpy()

    ex = TiledExecutor(net, stack.shape[1:], TileConfig(chunk_size=chunk, batch_size=batch, block=2, margin=1))
    list(ex.run(ArrayStack(stack), consume))
    assert len(ex.grid) > 1
    return out


@pytest.mark.parametrize(("depth", "h", "w", "chunk", "batch"), [
    (2, 150, 150, 48, 8),  # last tiles shifted back inside the frame
    (2, 130, 70, 24, 3),  # sizes not multiples of the factor: padded pixels
    (1, 61, 53, 8, 4),  # many seams
])
def test_coordinates_are_exact_under_tiling(depth: int, h: int, w: int, chunk: int, batch: int) -> None:
    net = _net((h, w), depth)
    stack = _stack(4, h, w, seed=h + w)
    tiled = _tiled(net, stack, chunk, batch)
    assert not np.isnan(tiled).any()
    assert channel_error(tiled, _whole(net, stack)) <= SAME_MATH


def test_tiles_told_the_wrong_place_differ() -> None:
    """Control: every tile told it sits at the frame's origin gives another output (the place is used)."""
    net = _net((150, 150))
    stack = _stack(3, 150, 150, seed=9)

    class Placeless:  # a view of the network that ignores the place the executor gives
        config = net.config

        def __getattr__(self, name: str):
            return getattr(net, name)

        def normalize(self, x, level=None, read_var=None, origin=None):
            return net.normalize(x, level, read_var)

    assert channel_error(_tiled(Placeless(), stack, 48, 8), _whole(net, stack)) > 100 * SAME_MATH


def test_coordinates_run_from_minus_one_to_one_over_the_field() -> None:
    net = _net((101, 201))
    c = net.field_coordinates(torch.tensor([49.0, 99.0]), (3, 3))
    assert torch.allclose(c[0, 1], torch.tensor([-0.01, 0.0, 0.01]))  # x at columns 99..101 of 201
    assert torch.allclose(c[1, :, 0], torch.tensor([-0.02, 0.0, 0.02]))  # y at rows 49..51 of 101
    whole = net.field_coordinates(torch.zeros(2), (101, 201))
    assert whole[0, 0, 0] == -1 and whole[0, 0, -1] == 1 and whole[1, -1, 0] == 1
    assert net.config.input_channels == 5 and ModelConfig.tiny().input_channels == 3
    assert "field_shape" not in ModelConfig.tiny().to_dict()  # checkpoints of other models unchanged
    with pytest.raises(ConfigError, match="field_shape"):
        ModelConfig(field_shape=(10,))


def test_training_crops_carry_their_place_in_the_field() -> None:
    b, h, w = 2, 64, 64
    batch = {"frames": torch.zeros(b, 3, h, w), "bg": torch.zeros(b, h, w), "read_var": torch.zeros(b, h, w),
             "em": torch.zeros(b, 1, 4), "mask": torch.zeros(b, 1, dtype=torch.bool),
             "origin": torch.tensor([[100.0, 200.0], [0.0, 8.0]])}
    crops = list(chunk_batch(batch, 32))
    assert [c["origin"].tolist() for c in crops] == [
        [[100.0, 200.0], [0.0, 8.0]], [[100.0, 232.0], [0.0, 40.0]],
        [[132.0, 200.0], [32.0, 8.0]], [[132.0, 232.0], [32.0, 40.0]]]
    # and the crop's output equals the whole window's output there (the place comes with the crop)
    net = _net((300, 400))
    frames = torch.from_numpy(_stack(3, h, w)).unsqueeze(0)
    origin = torch.tensor([[100.0, 200.0]])
    with torch.no_grad():
        whole = net(frames, origin=origin)
        moved = net(frames, origin=origin + 16)
    assert (whole - moved).abs().max() > 1e-3
