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
    """max over channels (axis -3) of max|a - b| / max|b| in that channel, for (..., C, H, W) arrays/tensors.

    A non-finite value counts as equal only to the same value in the same place of the reference (a NaN where
    the reference has a NaN); anywhere else the error is infinite, so that NaN or inf output never scores as a
    match."""
    a = np.asarray(a.detach().cpu() if hasattr(a, "detach") else a, dtype=np.float64)
    b = np.asarray(b.detach().cpu() if hasattr(b, "detach") else b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"channel_error: shapes differ, {a.shape} vs {b.shape}")
    odd_a, odd_b = ~np.isfinite(a), ~np.isfinite(b)
    same = (np.isnan(a) & np.isnan(b)) | (a == b)  # NaN for NaN, +inf for +inf, -inf for -inf
    if not np.array_equal(odd_a, odd_b) or not same[odd_a].all():
        return float("inf")
    axes = tuple(i for i in range(a.ndim) if i != a.ndim - 3)
    finite = np.isfinite(a) & np.isfinite(b)
    diff = np.where(finite, np.abs(a - b), 0.0).max(axis=axes)
    scale = np.where(finite, np.abs(b), 0.0).max(axis=axes)
    return float(np.max(diff / np.maximum(scale, 1e-12)))


def assert_same_emitters(a, b, threshold: float, *, fence: float = 10 * SAME_MATH, atol_px: float = 1e-3,
                         at_least: int = 20) -> None:
    """Two emitter tables (``frame``, ``x``, ``y``, ``prob``) from the same network computed in another order
    hold the same emitters, at the same positions to ``atol_px``.

    Only emitters on the fence may be in one table alone: those whose probability lies within ``fence`` of the
    detection ``threshold`` (another summation order moves a probability by ~SAME_MATH, which can put it on the
    other side). Every other emitter of either table must have its partner in the other, and at least
    ``at_least`` emitters are off the fence (a comparison of two empty tables proves nothing)."""
    from scipy.spatial import cKDTree

    def points(t) -> np.ndarray:  # frames 1e6 px apart: a partner is only ever in the same frame
        return np.column_stack([np.asarray(t["frame"], np.float64) * 1e6, np.asarray(t["x"], np.float64),
                                np.asarray(t["y"], np.float64)])

    pa, pb = points(a), points(b)
    for name, (p, q, table) in {"first": (pa, pb, a), "second": (pb, pa, b)}.items():
        dist = cKDTree(q).query(p, distance_upper_bound=atol_px)[0] if len(q) else np.full(len(p), np.inf)
        alone = ~(dist <= atol_px)
        off_fence = np.abs(np.asarray(table["prob"], np.float64) - threshold) > fence
        assert not (alone & off_fence).any(), (
            f"{int((alone & off_fence).sum())} emitters of the {name} table, clear of the threshold, have no "
            f"partner within {atol_px} px in the other: e.g. {p[alone & off_fence][:3].tolist()}")
        assert int(off_fence.sum()) >= at_least, f"only {int(off_fence.sum())} emitters off the fence"
