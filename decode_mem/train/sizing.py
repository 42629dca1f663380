"""``chunk_size='auto'``: the largest aligned training crop whose measured memory fits the budget."""

from __future__ import annotations

import math

import psutil
import torch

from decode_mem.model.net import DecodeNet
from decode_mem.train.config import TrainConfig

PROBE = 64  # px side of the probe crop
BUDGET_FRACTION = 0.6  # of free device memory (or available host memory on CPU)


def resolve_chunk_size(cfg: TrainConfig, net: DecodeNet, device: torch.device) -> int | None:
    """Crop side for training, or None when chunking is off (whole frames)."""
    if not cfg.use_chunking:
        return None
    if cfg.chunk_size != "auto":
        return _aligned(int(cfg.chunk_size), net.downsample_factor)
    per_px = bytes_per_pixel(net, device, cfg.batch_size)  # per pixel of one window
    budget = BUDGET_FRACTION * _free_bytes(device)
    side = int(math.sqrt(max(budget, 0.0) / max(per_px * cfg.batch_size, 1.0)))
    side = min(side, max(cfg.simulation.frame_size))
    return max(_aligned(side, net.downsample_factor), 4 * net.downsample_factor)


def bytes_per_pixel(net: DecodeNet, device: torch.device, batch_size: int) -> float:
    """Measured training memory (forward + backward) per input pixel of a batch, from a small probe."""
    x = torch.randn(batch_size, 3, PROBE, PROBE, device=device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        net(x).float().sum().backward()
        peak = torch.cuda.max_memory_allocated(device) - base
    else:
        # on CPU the activations of forward+backward are the dominant, roughly proportional term;
        # count saved tensors' bytes through autograd hooks, independent of the allocator
        peak = _saved_tensor_bytes(net, x)
    net.zero_grad(set_to_none=True)
    return peak / (batch_size * PROBE * PROBE)


def _saved_tensor_bytes(net: DecodeNet, x: torch.Tensor) -> int:
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = net(x)
    out.float().sum().backward()
    return 2 * total  # activations kept for backward + gradients of the same size during backward


def _free_bytes(device: torch.device) -> float:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return float(free)
    return float(psutil.virtual_memory().available)


def _aligned(size: int, multiple: int) -> int:
    return max(multiple, size // multiple * multiple)
