"""Numeric precision: the one table of autocast dtypes and the rule ``amp='auto'`` follows on each machine.

``auto``: on CUDA bf16 where the GPU supports it, else fp16 (with a GradScaler when training); on a CPU bf16
only where it has native bf16 arithmetic (AVX-512 BF16 or AMX: there bf16 convolutions are faster), else
fp32 — emulated bf16 is slower than fp32 and less exact.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from functools import cache

import torch

from decode_mem.config import AMP_CHOICES, check_choice

__all__ = ["AMP_CHOICES", "AMP_DTYPES", "autocast", "cpu_has_native_bf16", "dtype_name", "emulated_bf16",
           "resolve_amp"]
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@cache
def cpu_has_native_bf16() -> bool:
    """True when this CPU computes bf16 natively (AVX-512 BF16 or AMX), as oneDNN would use it."""
    cpu = getattr(torch._C, "_cpu", None)
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


def resolve_amp(amp: str | None, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``amp`` in ``AMP_CHOICES`` (None: 'off') on ``device``; None means fp32."""
    if amp in (None, "off"):
        return None
    if amp in AMP_DTYPES:
        return AMP_DTYPES[amp]
    check_choice("amp", amp, AMP_CHOICES)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "cpu":
        return torch.bfloat16 if cpu_has_native_bf16() else None
    return None


def emulated_bf16(dtype: torch.dtype | str | None, device: torch.device) -> bool:
    """True for bf16 (a dtype or 'bf16') on a CPU without native bf16: torch then emulates it, slower than
    fp32 and with fp32 buffers beside the bf16 tensors (``decode_mem.footprint`` plans for them)."""
    is_bf16 = dtype in (torch.bfloat16, "bf16")
    return is_bf16 and device.type == "cpu" and not cpu_has_native_bf16()


def autocast(device: torch.device, dtype: torch.dtype | None) -> AbstractContextManager:
    """``torch.autocast`` for the device; disabled when ``dtype`` is None (fp32)."""
    return torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None)


def dtype_name(dtype: torch.dtype | None) -> str:
    """'bf16', 'fp16' or 'fp32'."""
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32")
