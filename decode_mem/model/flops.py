"""The arithmetic of a network as a long stream computes it (what issue 77 held the light CPU model to)."""

from __future__ import annotations

from typing import Any


def stream_flops(net: Any, side: int = 256) -> int:
    """FLOPs of one streamed ``side``² frame, counted by torch's FLOP counter: the frame's features, then the temporal
    part on three frames' features (each frame's features are computed once in a stream)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.zeros(1, net.config.input_channels, side, side)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        f = net.frame_features(x)
        net.temporal(f, f, f)
    return int(counter.get_total_flops())
