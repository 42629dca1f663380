"""Which bead of channel 2 is which bead of channel 1, without knowing the map yet.

1. The shift: every difference ``p1_i - F(p2_j)`` is a vote; the true shift is where the votes pile up (a 2-D
   histogram of ``VOTE_BIN`` px bins, summed over 3 x 3 bins). ``F`` is each of the four mirror images (a
   two-camera setup often mirrors one camera): the one with the most votes wins.
2. Pairs: mutual nearest neighbours within a radius under the map so far, then the map refitted to them: a shift,
   an affine map (radius ``AFFINE_PX``: the distortion beyond affine is a few px at most), a cubic where enough
   beads allow, and a last pass within ``FINAL_PX``. A pair whose residual under the last fit is far beyond the
   others' (``OUTLIER_MADS`` robust deviations) is dropped (a bead on one side, dust on the other).
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

from decode_mem.register.transform import fit_polynomial, n_terms

VOTE_BIN = 2.0  # px
AFFINE_PX = 4.0  # px: pairs under the shift and under the affine map
FINAL_PX = 1.0  # px: pairs under the last (cubic) fit
OUTLIER_MADS = 6.0
MIRRORS = ((1.0, 1.0), (-1.0, 1.0), (1.0, -1.0), (-1.0, -1.0))


def mutual_pairs(a: np.ndarray, b: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """Indices (i, j) with ``a[i]`` and ``b[j]`` each other's nearest neighbour, closer than ``radius``."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    da, ja = cKDTree(b).query(a)
    _, ib = cKDTree(a).query(b)
    i = np.nonzero((da < radius) & (ib[ja] == np.arange(len(a))))[0]
    return i, ja[i]


def best_shift(p1: np.ndarray, p2: np.ndarray, mirror: tuple[float, float]) -> tuple[np.ndarray, int]:
    """(shift (2,), votes): the shift that takes the most of channel 2's beads (their ``mirror`` image) onto
    channel 1's."""
    q = p2 * np.asarray(mirror)
    d = (p1[:, None, :] - q[None, :, :]).reshape(-1, 2)
    lo, hi = d.min(axis=0) - VOTE_BIN, d.max(axis=0) + VOTE_BIN
    bins = np.clip(np.ceil((hi - lo) / VOTE_BIN).astype(int), 1, 2000)
    h, ex, ey = np.histogram2d(d[:, 0], d[:, 1], bins=bins, range=[[lo[0], hi[0]], [lo[1], hi[1]]])
    pad = np.pad(h, 1)
    summed = sum(pad[1 + a:1 + a + h.shape[0], 1 + b:1 + b + h.shape[1]] for a in (-1, 0, 1) for b in (-1, 0, 1))
    k = np.unravel_index(int(np.argmax(summed)), summed.shape)
    cx, cy = (ex[k[0]] + ex[k[0] + 1]) / 2, (ey[k[1]] + ey[k[1] + 1]) / 2
    near = (np.abs(d[:, 0] - cx) <= 1.5 * VOTE_BIN) & (np.abs(d[:, 1] - cy) <= 1.5 * VOTE_BIN)
    return np.median(d[near], axis=0), int(summed[k])


def refine(p1: np.ndarray, p2: np.ndarray, i1: np.ndarray, i2: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Pairs under an affine map, then under a cubic where enough beads allow (module docstring); and their RMS
    residual (px) under the last fit (inf: too few pairs to fit)."""
    centre = tuple(p2.mean(axis=0))
    scale = float(max(np.ptp(p2, axis=0).max() / 2, 1.0))
    rms = float("inf")
    for radius in (AFFINE_PX, FINAL_PX):
        if len(i1) <= n_terms(1):
            break  # too few pairs to fit even a shift and a rotation: what the shift gave stands
        degree = 3 if radius == FINAL_PX and len(i1) >= 2 * n_terms(3) else 1
        t = fit_polynomial(p2[i2], p1[i1], degree, centre, scale)
        mx, my = t(p2[:, 0], p2[:, 1])
        i1, i2 = mutual_pairs(p1, np.column_stack([mx, my]), radius)
    if len(i1) > n_terms(1):
        degree = 3 if len(i1) >= 2 * n_terms(3) else 1
        t = fit_polynomial(p2[i2], p1[i1], degree, centre, scale)
        mx, my = t(p2[i2, 0], p2[i2, 1])
        r = np.hypot(p1[i1, 0] - mx, p1[i1, 1] - my)
        mad = 1.4826 * np.median(np.abs(r - np.median(r)))
        keep = r <= np.median(r) + OUTLIER_MADS * max(mad, 0.01)
        i1, i2 = i1[keep], i2[keep]
        rms = float(np.sqrt((r[keep] ** 2).mean()))
    return i1, i2, rms


def match_beads(p1: np.ndarray, p2: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[float, float]]:
    """Indices (i1, i2) of the beads of channel 1 (``p1`` (n1, 2) px) and channel 2 (``p2``) that are the same bead,
    and the mirror found (module docstring): of the four mirror images, the one that pairs the most beads, with the
    smallest residual among equals; none unless another does clearly better (a regular grid of beads also pairs with
    its point reflection, a rotation by 180°, which the maps can follow: nothing but this preference tells them
    apart)."""
    if len(p1) == 0 or len(p2) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), (1.0, 1.0)
    found = []
    for mirror in MIRRORS:
        shift, _ = best_shift(p1, p2, mirror)
        i1, i2 = mutual_pairs(p1, p2 * np.asarray(mirror) + shift, AFFINE_PX)
        i1, i2, rms = refine(p1, p2, i1, i2)
        found.append((len(i1), rms, i1, i2, mirror))
    best = max(found, key=lambda f: (f[0], -f[1]))
    plain = found[0]  # no mirror: kept unless another pairs more beads or fits clearly better (a symmetric pattern,
    if plain[0] >= best[0] and plain[1] <= 2 * best[1] + 0.01:  # a grid, pairs as well in its point reflection)
        best = plain
    return best[2], best[3], best[4]
