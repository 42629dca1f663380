"""Numeric precision: the one table of autocast dtypes and the rule ``amp='auto'`` follows on each machine.

``auto``: on CUDA bf16 where the GPU supports it, else fp16 (with a GradScaler when training); on a CPU bf16
only where it has native bf16 arithmetic (AVX-512 BF16 or AMX: there bf16 convolutions are faster), else
fp32 — emulated bf16 is slower than fp32 and less exact.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from functools import cache
from typing import Any

from decode_mem.config import AMP_CHOICES, check_choice

__all__ = ["AMP_CHOICES", "amp_name", "autocast", "cpu_has_native_bf16", "dtype_name", "emulated_bf16",
           "resolve_amp"]
AMP_NAMES = ("bf16", "fp16")  # the autocast dtypes by name (``resolve_amp`` gives torch's)


@cache
def cpu_has_native_bf16() -> bool:
    """True when this CPU computes bf16 natively (AVX-512 BF16 or AMX), as oneDNN would use it: torch's probes where
    torch is loaded and has them, else the CPU's flags (what torch 2.13, which has none, reads too)."""
    torch = sys.modules.get("torch")
    cpu = getattr(getattr(torch, "_C", None), "_cpu", None)
    for probe in ("_is_amx_tile_supported", "_is_avx512_bf16_supported"):
        fn = getattr(cpu, probe, None)
        if fn is not None and fn():
            return True
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next((line for line in fh if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def amp_name(amp: str | None, device: Any) -> str | None:
    """``resolve_amp``'s dtype by name, 'bf16' or 'fp16' (None: fp32), without torch on a CPU."""
    if amp in (None, "off"):
        return None
    if amp in AMP_NAMES:
        return amp
    check_choice("amp", amp, AMP_CHOICES)
    if device.type == "cuda":
        import torch

        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if device.type == "cpu":
        return "bf16" if cpu_has_native_bf16() else None
    return None


def resolve_amp(amp: str | None, device: Any) -> Any:
    """The autocast dtype (torch's) for ``amp`` in ``AMP_CHOICES`` (None: 'off') on ``device``; None means fp32."""
    name = amp_name(amp, device)
    if name is None:
        return None
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


def emulated_bf16(dtype: Any, device: Any) -> bool:
    """True for bf16 (a dtype or 'bf16') on a CPU without native bf16: torch then emulates it, slower than
    fp32 and with fp32 buffers beside the bf16 tensors (``decode_mem.footprint`` plans for them)."""
    return dtype_name(dtype) == "bf16" and device.type == "cpu" and not cpu_has_native_bf16()


def autocast(device: Any, dtype: Any) -> AbstractContextManager:
    """``torch.autocast`` for the device; disabled when ``dtype`` is None (fp32)."""
    import torch

    return torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None)


def dtype_name(dtype: Any) -> str:
    """'bf16', 'fp16' or 'fp32' of a torch dtype or of a name (torch is not imported for a name)."""
    if dtype in ("bf16", "fp16"):
        return dtype
    return {"torch.bfloat16": "bf16", "torch.float16": "fp16"}.get(str(dtype), "fp32")
