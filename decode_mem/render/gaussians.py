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

Memory: the grids (4/3 of one float32 image) and at most ``ELEMENTS`` pixel updates (12 bytes each) at a time.
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
        index_type = np.int32 if grid.size < 2 ** 31 else np.int64
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
                cols = np.clip(cols, 0, w - 1).astype(index_type)
                rows = (np.clip(rows, 0, h - 1) * w).astype(index_type)
                index = rows[:, :, None] + cols[:, None, :]
                np.add.at(flat, index.reshape(-1), (wy[:, :, None] * wx[:, None, :]).reshape(-1))

    def image(self, consume: bool = False) -> np.ndarray:
        """The finest grid plus every coarser one interpolated onto it (float32, ``shape``). ``consume``: reuse
        the grids' memory (the object is spent afterwards); else they stay and more can be added."""
        if not self.grids:
            return np.zeros(self.shape, np.float32)
        carried: np.ndarray | None = None
        for level in range(max(self.grids), 0, -1):
            here = self.grids.get(level)
            if here is not None:
                carried = here if carried is None else (_add_into(here, carried) if consume else here + carried)
            if carried is not None:
                f = 2 ** (level - 1)
                carried = _upsample2(carried, (-(-self.shape[0] // f), -(-self.shape[1] // f)))
        finest = self.grids.get(0)
        if consume:
            self.grids = {}
        if finest is None:
            return carried if carried is not None else np.zeros(self.shape, np.float32)
        if carried is None:
            return finest if consume else finest.copy()
        return _add_into(finest, carried) if consume else finest + carried


def _weights(offset: np.ndarray, sigma: np.ndarray, d: np.ndarray) -> np.ndarray:
    """(n, len(d)) float32: a Gaussian of ``sigma`` centred ``offset`` from pixel 0, sampled at the pixels ``d``,
    each row summing to 1."""
    z = (d[None, :] - offset[:, None]).astype(np.float32) / sigma[:, None].astype(np.float32)
    weights = np.exp(np.float32(-0.5) * z * z)
    weights /= weights.sum(axis=1, keepdims=True)
    return weights


def _add_into(target: np.ndarray, other: np.ndarray) -> np.ndarray:
    target += other
    return target


def _upsample2(image: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """``image`` on a grid twice as fine, cut to ``shape``: linear interpolation (coarse pixel centres at the fine
    pixels' shared corners), edges repeated, and divided by 4 so that sums are kept (each coarse value gives out
    exactly its own total before the cut)."""
    out = image
    for axis, n in enumerate(shape):
        a = np.moveaxis(out, axis, 0)
        before = np.concatenate([a[:1], a[:-1]])
        after = np.concatenate([a[1:], a[-1:]])
        fine = np.empty((2 * a.shape[0], *a.shape[1:]), np.float32)
        fine[0::2] = 0.375 * a + 0.125 * before
        fine[1::2] = 0.375 * a + 0.125 * after
        out = np.moveaxis(fine[:n], 0, axis)
    return np.ascontiguousarray(out)
