"""Receptive fields measured by an impulse response: the technique, for any network of tile-exact parts.

A receptive field is a property of an architecture (depth, up-sampling, layer layout), not of the weights. It
is measured on a *probe* copy of the network (``probe_of``): float64, positive conv weights, zero biases, each
U-Net max-pool replaced by an average pool over the same 2x2 window; with an input of all ones every
pre-activation is positive, every layer is strictly increasing in each input of its window, and the gradient
of an output pixel w.r.t. the input is > 0 exactly on the set of pixels the output can depend on in the real
network (no cancellation, no dead units, no max-pool selection). ``impulse_radius`` is the largest Chebyshev
distance of that set from the output pixel, taken over all ``factor`` positions of the output pixel modulo the
down-sampling factor (the set is a product of row and column intervals, so the diagonal positions cover every
phase). ``DecodeNet``'s parts are measured this way in ``decode_mem.model.net.measure_receptive_field``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from decode_mem.model.unet import UNet2d


def probe_of(net: nn.Module) -> nn.Module:
    """``net`` made a probe in place (float64, eval, positive weights, zero biases, average pools); returned."""
    net = net.double().eval()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                m.weight.fill_(1.0 / m.weight[0].numel())
                m.bias.zero_()
    for m in net.modules():
        if isinstance(m, UNet2d):
            m.pool = nn.AvgPool2d(2)
    return net


def impulse_radius(fn: Callable[[torch.Tensor], torch.Tensor], in_channels: int, factor: int) -> int:
    """Receptive-field radius in px of ``fn`` (a probe's part: ``(factor, in_channels, S, S)`` float64 ->
    ``(factor, C, S, S)``) whose input sides must be multiples of ``factor``; the probe grows until it fits."""
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
