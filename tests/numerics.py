"""Float comparisons that hold on any CPU: errors relative to each output channel's own scale.

Two computations of the same network output that differ only in summation order (batch or tile shape, or
another CPU's kernels: AVX2, AVX-512, AMX pick different blockings) agree to float32 rounding accumulated
over a few thousand multiply-adds per layer: about 1e-6 of a channel's magnitude, measured up to 1e-5 on
one Intel machine. ``SAME_MATH`` allows 5x that. Wrong computations (a halo smaller than the receptive
field, missing context frames) differ by 1e-2 and more, so the tests still tell exact from approximate.
"""

from __future__ import annotations

import numpy as np

SAME_MATH = 5e-5  # relative to each channel's max |value|: the same math in another order


def channel_error(a, b) -> float:
    """max over channels (axis -3) of max|a - b| / max|b| in that channel, for (..., C, H, W) arrays/tensors."""
    a = np.asarray(a.detach().cpu() if hasattr(a, "detach") else a, dtype=np.float64)
    b = np.asarray(b.detach().cpu() if hasattr(b, "detach") else b, dtype=np.float64)
    axes = tuple(i for i in range(a.ndim) if i != a.ndim - 3)
    finite = np.isfinite(a) & np.isfinite(b)
    diff = np.where(finite, np.abs(a - b), 0.0).max(axis=axes)
    scale = np.where(finite, np.abs(b), 0.0).max(axis=axes)
    return float(np.max(diff / np.maximum(scale, 1e-12)))
