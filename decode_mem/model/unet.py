"""A plain, tile-exact 2-D U-Net.

Tile exactness (DESIGN.md §5) constrains the building blocks, not the weights:

* every convolution is 3x3 (or 1x1) with zero "same" padding, stride 1;
* down-sampling is a 2x2 max-pool (stride 2) per level, so the total factor is ``2**depth``;
* up-sampling is nearest-neighbour x2 followed by a 1x1 conv, or a 2x2 stride-2 transposed conv;
* no normalization layer of any kind (no per-sample or per-batch statistics), no global pooling.

With these, an output pixel depends only on inputs inside a fixed window (the receptive field), and a
shift of the input by a multiple of ``2**depth`` shifts the output by the same amount.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from decode_mem.config import check_choice
from decode_mem.errors import ConfigError
from decode_mem.model.config import UPSAMPLE_MODES

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {  # in place where possible: every activation follows a conv
    "elu": lambda: nn.ELU(inplace=True),        # whose output nothing else reads (autograd keeps the result)
    "relu": lambda: nn.ReLU(inplace=True),
    "leaky_relu": lambda: nn.LeakyReLU(0.01, inplace=True),
    "silu": nn.SiLU,
    "gelu": nn.GELU,
}  # ``ACTIVATION_NAMES``, the torch-free list ``ModelConfig`` checks a name against, names the same (a test)


def make_activation(name: str) -> nn.Module:
    """A fresh activation module by name (one of ``ACTIVATIONS``)."""
    try:
        return ACTIVATIONS[name]()
    except KeyError:
        raise ConfigError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}") from None


class ConvBlock(nn.Sequential):
    """Two 3x3 'same' convolutions, each followed by the activation."""

    def __init__(self, in_channels: int, out_channels: int, activation: str) -> None:
        super().__init__(
            nn.Conv2d(in_channels, out_channels, 3, padding=1),
            make_activation(activation),
            nn.Conv2d(out_channels, out_channels, 3, padding=1),
            make_activation(activation),
        )


class Upsample(nn.Module):
    """x2 up-sampling that halves the channels: nearest + 1x1 conv, or a 2x2 stride-2 transposed conv.

    'nearest' runs the 1x1 conv first: a pointwise conv commutes with nearest up-sampling, so the result is the
    same, computed on a quarter of the pixels and with half the channels up-sampled.
    """

    def __init__(self, in_channels: int, out_channels: int, mode: str) -> None:
        super().__init__()
        check_choice("upsample", mode, UPSAMPLE_MODES)
        self.mode = mode
        if mode == "nearest":
            self.conv: nn.Module = nn.Conv2d(in_channels, out_channels, 1)
        else:
            self.conv = nn.ConvTranspose2d(in_channels, out_channels, 2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if self.mode == "nearest":
            x = nn.functional.interpolate(x, scale_factor=2.0, mode="nearest")
        return x


class UNet2d(nn.Module):
    """U-Net with ``depth`` max-pool levels; level ``i`` has ``features * 2**i`` channels.

    ``forward`` needs H and W to be multiples of ``2**depth`` (checked). The output is
    ``activation(conv1x1(...))`` with ``out_channels`` channels, at the input's resolution.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        features: int,
        depth: int,
        activation: str = "elu",
        upsample: str = "nearest",
    ) -> None:
        super().__init__()
        self.depth = depth
        widths = [features * 2**i for i in range(depth + 1)]
        self.encoders = nn.ModuleList()
        c = in_channels
        for w in widths[:-1]:
            self.encoders.append(ConvBlock(c, w, activation))
            c = w
        self.pool = nn.MaxPool2d(2)
        self.base = ConvBlock(c, widths[-1], activation)
        self.ups = nn.ModuleList()
        self.decoders = nn.ModuleList()
        for i in reversed(range(depth)):
            self.ups.append(Upsample(widths[i + 1], widths[i], upsample))
            self.decoders.append(ConvBlock(2 * widths[i], widths[i], activation))
        self.out = nn.Sequential(nn.Conv2d(widths[0], out_channels, 1), make_activation(activation))

    @property
    def factor(self) -> int:
        return 2**self.depth

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        if h % self.factor or w % self.factor:
            raise ValueError(f"UNet2d input H, W must be multiples of {self.factor}, got {h}x{w}")
        skips = []
        for enc in self.encoders:
            x = enc(x)
            skips.append(x)
            x = self.pool(x)
        x = self.base(x)
        for up, dec, skip in zip(self.ups, self.decoders, reversed(skips), strict=True):
            x = dec(torch.cat([up(x), skip], dim=1))
        return self.out(x)
