"""Localizations drawn as normalized 2-D Gaussians of their own precision (Picasso's default rendering).

A localization at ``(x, y)`` with precisions ``(σx, σy)`` (all in render pixels) adds to the pixels of a small patch
around it (out to ``TRUNCATE`` σ) the values of a Gaussian sampled at their centres and normalized to sum 1: the
image's total is the number of localizations drawn (less what spills over the field's border), its peak sits at the
localization, and a precise localization is a tall narrow spot, an imprecise one a faint wide one.

Wide Gaussians would need large patches (σ = 10 px: 61² pixels each). A localization whose narrower σ exceeds
``LEVEL_SIGMA`` px is drawn on a grid 2, 4, ... times coarser, where it is 1 to 2 of that grid's pixels wide; at
the end each coarser grid is interpolated linearly onto the next finer one (sums kept), its σ having been reduced
beforehand by the variance that interpolation adds, so the width drawn is the one asked. Every localization so costs
at most about ``(2 ⌈3 LEVEL_SIGMA⌉ + 1)²`` = 13² pixel updates, and the grids together hold 4/3 of the image.
A σ wider than the whole field is drawn as wide as the coarsest grid allows (about the field).

Memory: the grids (at most 4/3 of one float32 image) and at most ``ELEMENTS`` pixel updates (about 16 bytes each)
at a time; joining the grids (``image``) adds a band of rows at a time.
No file, no table: callers give coordinates and σ in render pixels (``render.image.Rendering``).
"""

from __future__ import annotations

import math

import numpy as np

LEVEL_SIGMA = 2.0  # px: a Gaussian at most this wide (its narrower axis) is drawn on the finest grid
TRUNCATE = 3.0  # a patch reaches this many σ from its centre pixel
ELEMENTS = 1 << 21  # pixel updates computed at a time


def interpolation_variance(level: int) -> float:
    """Variance (px² of grid ``level``) that interpolating grid ``level`` down to the finest grid adds: linear
    interpolation by 2 is a tent of variance 1/6 of the coarser pixel², once per step."""
    return 2.0 / 9.0 * (1.0 - 4.0 ** -level)


class GaussianImage:
    """An image of ``shape`` (rows, columns) render pixels filled with Gaussians, ``add`` after ``add``; ``image()``
    gives the sum. Render pixel ``i`` spans ``[i, i + 1)`` in the coordinates ``add`` takes (its centre at
    ``i + 0.5``)."""

    def __init__(self, shape: tuple[int, int]) -> None:
        self.shape = (int(shape[0]), int(shape[1]))
        # the coarsest grid is a pixel or two: a Gaussian wider than the field is drawn there
        self.top = max(0, math.ceil(math.log2(max(self.shape))))
        self.grids: dict[int, np.ndarray] = {}  # level -> float32 image of ceil(shape / 2^level)

    def grid(self, level: int) -> np.ndarray:
        if level not in self.grids:
            f = 2 ** level
            self.grids[level] = np.zeros((-(-self.shape[0] // f), -(-self.shape[1] // f)), np.float32)
        return self.grids[level]

    def add(self, x: np.ndarray, y: np.ndarray, sigma_x: np.ndarray, sigma_y: np.ndarray) -> None:
        """Draw Gaussians centred at ``x``, ``y`` (render pixels from the image's outer corner) of widths
        ``sigma_x``, ``sigma_y`` (render pixels, > 0, finite: the caller applies its floor and fallback)."""
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        sx, sy = np.asarray(sigma_x, np.float64), np.asarray(sigma_y, np.float64)
        narrow = np.minimum(sx, sy)
        level = np.clip(np.ceil(np.log2(np.maximum(narrow, 1e-300) / LEVEL_SIGMA)), 0, self.top).astype(np.int64)
        for lv in np.unique(level):
            pick = level == lv
            f = 2.0 ** lv
            v = interpolation_variance(int(lv))
            # the σ that, interpolated down to the finest grid, is the σ asked; capped on the coarsest grid
            gx = np.sqrt(np.maximum((sx[pick] / f) ** 2 - v, 0.25))
            gy = np.sqrt(np.maximum((sy[pick] / f) ** 2 - v, 0.25))
            if lv == self.top:
                gx, gy = np.minimum(gx, LEVEL_SIGMA), np.minimum(gy, LEVEL_SIGMA)
            self._draw(self.grid(int(lv)), x[pick] / f - 0.5, y[pick] / f - 0.5, gx, gy)

    def _draw(self, grid: np.ndarray, cx: np.ndarray, cy: np.ndarray, sx: np.ndarray, sy: np.ndarray) -> None:
        """Gaussians on one grid: centres ``cx``, ``cy`` in its pixel-centre coordinates, σ in its pixels; grouped
        by patch radius, a group at a time in slices of at most ``ELEMENTS`` pixel updates."""
        radius = np.maximum(1, np.ceil(TRUNCATE * np.maximum(sx, sy))).astype(np.int64)
        h, w = grid.shape
        flat = grid.reshape(-1)
        for r in np.unique(radius):
            group = np.flatnonzero(radius == r)
            side = 2 * int(r) + 1
            step = max(1, ELEMENTS // (side * side))
            d = np.arange(-r, r + 1)
            for start in range(0, len(group), step):
                sel = group[start:start + step]
                col0, row0 = np.rint(cx[sel]), np.rint(cy[sel])
                sel = sel[np.argsort(row0 * w + col0, kind="stable")]  # neighbours in memory: fewer cache misses
                col0, row0 = np.rint(cx[sel]), np.rint(cy[sel])
                wx = _weights(cx[sel] - col0, sx[sel], d)
                wy = _weights(cy[sel] - row0, sy[sel], d)
                cols = col0.astype(np.int64)[:, None] + d
                rows = row0.astype(np.int64)[:, None] + d
                wx[(cols < 0) | (cols >= w)] = 0.0  # spills over the border: not drawn
                wy[(rows < 0) | (rows >= h)] = 0.0
                cols = np.clip(cols, 0, w - 1)  # int64 (numpy's intp) indices: ufunc.at 1.5x faster than with
                rows = np.clip(rows, 0, h - 1) * w  # int32 ones (numpy 2.4, docs/developers.md)
                index = rows[:, :, None] + cols[:, None, :]
                np.add.at(flat, index.reshape(-1), (wy[:, :, None] * wx[:, None, :]).reshape(-1))

    def image(self, consume: bool = False) -> np.ndarray:
        """The finest grid plus every coarser one interpolated onto it (float32, ``shape``). ``consume``: reuse
        the grids' memory (the object is spent afterwards); else they stay and more can be added. Memory beyond the
        grids: none with ``consume``, else a copy of each finer grid that receives a coarser one."""
        carried: np.ndarray | None = None  # the coarser grids so far, summed on the current grid
        own = False  # carried is an array of its own, not one of the grids
        for level in range(max(self.grids, default=0), -1, -1):
            here = self.grids.get(level)
            if carried is None:
                carried = here
                continue
            f = 2 ** level
            shape = (-(-self.shape[0] // f), -(-self.shape[1] // f))
            target = np.zeros(shape, np.float32) if here is None else here if consume else here.copy()
            _upsample2_into(target, carried)
            carried, own = target, True
        if consume:
            self.grids = {}
        if carried is None:
            return np.zeros(self.shape, np.float32)
        return carried if consume or own else carried.copy()


def _weights(offset: np.ndarray, sigma: np.ndarray, d: np.ndarray) -> np.ndarray:
    """(n, len(d)) float32: a Gaussian of ``sigma`` centred ``offset`` from pixel 0, sampled at the pixels ``d``,
    each row summing to 1."""
    z = (d[None, :] - offset[:, None]).astype(np.float32) / sigma[:, None].astype(np.float32)
    weights = np.exp(np.float32(-0.5) * z * z)
    weights /= weights.sum(axis=1, keepdims=True)
    return weights


def _upsample2_into(target: np.ndarray, coarse: np.ndarray, band: int = 256) -> None:
    """Add ``coarse`` on a grid twice as fine to ``target`` (cut to its shape): linear interpolation (coarse pixel
    centres at the fine pixels' shared corners), edges repeated, divided by 4 so that sums are kept (each coarse
    value gives out exactly its own total before the cut). ``band`` coarse rows at a time: little memory.

    Columns first, on the coarse rows (strided writes over half the pixels), then rows, written whole: 2.2-3.0x
    the speed of rows first (1280² -> 2560², the report's image at 1 emitter/µm² on a 256² camera; ad hoc on the
    2-core AMX Xeon, three runs each; the same values up to float rounding, at most 1.2e-7 on random grids)."""
    n = coarse.shape[0]
    height, width = target.shape
    for i0 in range(0, n, band):
        i1 = min(n, i0 + band)
        r0, r1 = 2 * i0, min(2 * i1, height)
        if r1 <= r0:
            break
        lo, hi = max(i0 - 1, 0), min(i1 + 1, n)  # a neighbouring row each side, where there is one
        wide = _upsample_columns(coarse[lo:hi])[:, :width]
        quarter = wide * np.float32(0.125)
        wide *= np.float32(0.375)
        rows = np.arange(i0, i1)
        mid = wide[i0 - lo:i1 - lo]
        fine = np.empty((i1 - i0, 2, wide.shape[1]), np.float32)  # fine rows 2i and 2i + 1 of coarse row i
        np.add(mid, quarter[np.maximum(rows - 1, 0) - lo], out=fine[:, 0])  # the row above (the edge repeated)
        np.add(mid, quarter[np.minimum(rows + 1, n - 1) - lo], out=fine[:, 1])  # the row below
        target[r0:r1] += fine.reshape(-1, wide.shape[1])[:r1 - r0]


def _upsample_columns(a: np.ndarray) -> np.ndarray:
    """``a`` (rows, columns) twice as wide: 3/4 of a value and 1/4 of its neighbour (the edge repeated), halved."""
    quarter = a * np.float32(0.125)
    fine = np.empty((*a.shape, 2), np.float32)  # fine columns 2j and 2j + 1 of coarse column j
    np.multiply(a, np.float32(0.375), out=fine[:, :, 0])
    fine[:, :, 1] = fine[:, :, 0]
    fine[:, 1:, 0] += quarter[:, :-1]
    fine[:, :1, 0] += quarter[:, :1]
    fine[:, :-1, 1] += quarter[:, 1:]
    fine[:, -1:, 1] += quarter[:, -1:]
    return fine.reshape(a.shape[0], 2 * a.shape[1])
