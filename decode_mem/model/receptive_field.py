"""The receptive field of a DecodeNet architecture, measured by an impulse response (the tiled executor's halo)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn

from decode_mem.model.config import CONTEXT_FRAMES, ModelConfig
from decode_mem.model.net import DecodeNet
from decode_mem.model.unet import UNet2d


def measure_receptive_field(config: ModelConfig, part: str = "total") -> int:
    """Receptive-field radius (px) of ``part`` in {"total", "frame", "temporal"} of a ``DecodeNet(config)``.

    The receptive field is a property of the architecture (depth, up-sampling, layer layout), not of the
    weights. It is measured by an impulse response on a *probe* network of the same architecture: float64,
    positive conv weights, zero biases, each max-pool replaced by an average pool over the same 2x2 window,
    input all ones. Then every pre-activation is positive, every layer is strictly increasing in each input
    of its window, and the gradient of an output pixel w.r.t. the input is > 0 exactly on the set of
    pixels the output can depend on in the real network (no cancellation, no dead units, no max-pool
    selection). The radius is the largest Chebyshev distance of that set from the output pixel, taken over
    all ``2**depth`` positions of the output pixel modulo the down-sampling factor (the set is a product
    of row and column intervals, so the diagonal positions cover every phase).
    """
    if part not in ("total", "frame", "temporal"):
        raise ValueError(f"part must be 'total', 'frame' or 'temporal', got {part!r}")
    return _measure_cached(config.depth, config.activation, config.upsample, part)


@functools.lru_cache(maxsize=64)
def _measure_cached(depth: int, activation: str, upsample: str, part: str) -> int:
    # independent of the caller's context: no inference mode / autocast, and the global RNG is left untouched
    with (
        torch.inference_mode(False),
        torch.enable_grad(),
        torch.autocast("cpu", enabled=False),
        torch.random.fork_rng(devices=[]),
    ):
        return _measure(depth, activation, upsample, part)


def _measure(depth: int, activation: str, upsample: str, part: str) -> int:
    probe_cfg = ModelConfig(depth=depth, features=2, inter_features=2, activation=activation, upsample=upsample)
    probe = _probe_network(probe_cfg)
    c = probe_cfg.inter_features
    c_in = probe_cfg.input_channels
    if part == "frame":
        fn, in_ch = probe.frame_features, c_in
    elif part == "temporal":

        def fn(f: torch.Tensor) -> torch.Tensor:
            return probe._temporal_raw(f[:, :c], f[:, c : 2 * c], f[:, 2 * c :])

        in_ch = CONTEXT_FRAMES * c
    else:

        def fn(x: torch.Tensor) -> torch.Tensor:
            n, _, h, w = x.shape
            feats = probe.frame_features(x.reshape(n * CONTEXT_FRAMES, c_in, h, w)).view(n, CONTEXT_FRAMES, -1, h, w)
            return probe._temporal_raw(feats[:, 0], feats[:, 1], feats[:, 2])

        in_ch = CONTEXT_FRAMES * c_in
    return _impulse_radius(fn, in_ch, probe_cfg.downsample_factor)


def _probe_network(cfg: ModelConfig) -> DecodeNet:
    net = DecodeNet(cfg).double().eval()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                m.weight.fill_(1.0 / m.weight[0].numel())
                m.bias.zero_()
    for m in net.modules():
        if isinstance(m, UNet2d):
            m.pool = nn.AvgPool2d(2)
    return net


def _impulse_radius(fn: Callable[[torch.Tensor], torch.Tensor], in_channels: int, factor: int) -> int:
    guess = 12 * factor + 8  # about the radius of two U-Nets of this depth; the probe grows if it is too small
    size = -(-(2 * guess + 2 * factor) // factor) * factor
    while size <= 16384:
        x = torch.ones(factor, in_channels, size, size, dtype=torch.float64, requires_grad=True)
        out = fn(x)
        centre = (size // 2 // factor) * factor
        idx = torch.arange(factor)
        picked = out[idx, :, centre + idx, centre + idx].sum()
        (grad,) = torch.autograd.grad(picked, x)
        support = grad.abs().sum(dim=1) > 0  # (factor, size, size)
        radius, touches = 0, False
        for a in range(factor):
            pos = centre + a
            rows = torch.nonzero(support[a].any(dim=1)).flatten()
            cols = torch.nonzero(support[a].any(dim=0)).flatten()
            lo_r, hi_r, lo_c, hi_c = int(rows.min()), int(rows.max()), int(cols.min()), int(cols.max())
            if min(lo_r, lo_c) == 0 or max(hi_r, hi_c) == size - 1:
                touches = True
                break
            radius = max(radius, pos - lo_r, hi_r - pos, pos - lo_c, hi_c - pos)
        if not touches:
            return radius
        size *= 2
    raise RuntimeError("receptive field larger than 8192 px: unexpected for this architecture")
