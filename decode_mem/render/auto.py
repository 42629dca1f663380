"""What a super-resolution image takes from its data: the render pixel, the contrast and the zoom square.

- Render pixel: about half the localizations' median precision (a median localization then spans ~5 pixels at its
  half maximum: finer pixels show nothing more, coarser ones blur what the data resolve), rounded to two significant
  digits, no finer than ``MIN_PIXEL`` and no finer than the field allows at ``MAX_SIDE`` pixels on its longer side
  (that bound rounded up to three digits).
- Contrast: black at 0, full colour at a high percentile of the pixels that hold something. Empty pixels are left
  out (a sparse image's all-pixel percentile is 0, so its few localizations would saturate or vanish), and a
  percentile, not the maximum, so that one heavily repeated spot does not make the rest black.
- Zoom: a square of about ``ZOOM_PIXELS`` render pixels (a round length in µm) where the localizations are densest,
  for a panel beside the whole field, whose overview shows a large field at a fraction of its pixels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MAX_SIDE = 4096  # render pixels on the image's longer side (64 MiB of float32) when the pixel is chosen here
MIN_PIXEL = 1.0  # nm
PERCENTILE = 99.5  # of the non-empty pixels: the top of the contrast
ZOOM_PIXELS = 400  # render pixels: the zoom square's edge is the roundest length up to this (its panel's on screen)
ZOOM_SHARE = 4  # the zoom square is at most a quarter of the image's shorter side (else no zoom panel)
ZOOM_MIN_PIXELS = 64  # render pixels: a smaller zoom square would show nothing the overview does not
SEARCH_PIXELS = 1024  # the densest square is searched on the image binned to at most this side (memory)
NICE = (1, 2, 5)  # round lengths: 1, 2, 5 x 10^k nm


def render_pixel_for(sigma_nm: np.ndarray, field_nm: Sequence[float], *, fallback_sigma: float,
                     max_side: int = MAX_SIDE) -> float:
    """The render pixel (nm) for localizations of precisions ``sigma_nm`` (a sample will do; NaN and ≤ 0 ignored,
    ``fallback_sigma`` without any) over a field of ``field_nm`` (height, width): see the module docstring."""
    sigma = np.asarray(sigma_nm, np.float64)
    sigma = sigma[np.isfinite(sigma) & (sigma > 0)]
    median = float(np.median(sigma)) if sigma.size else float(fallback_sigma)
    pixel = _round_sig(median / 2)
    coarsest = max(field_nm) / max_side  # the finest pixel the field allows
    if pixel < coarsest:
        pixel = _round_sig(coarsest, up=True, digits=3)
    return max(pixel, MIN_PIXEL)


def display_limit(image: np.ndarray, percentile: float = PERCENTILE) -> float:
    """The top of an image's contrast: ``percentile`` of its non-empty (> 0) pixels; 1 for an empty image."""
    positive = image[image > 0]
    top = float(np.percentile(positive, percentile)) if positive.size else 1.0
    return top if top > 0 else 1.0


def zoom_edge(shape: Sequence[int], render_pixel: float) -> float | None:
    """The zoom square's edge in µm for an image of ``shape`` render pixels (None: too small to need one)."""
    edge_px = min(ZOOM_PIXELS, min(shape) // ZOOM_SHARE)
    if edge_px < ZOOM_MIN_PIXELS:
        return None
    edge_nm = nice_length(edge_px * render_pixel)
    return edge_nm / 1000.0 if edge_nm / render_pixel >= ZOOM_MIN_PIXELS else None


def zoom_square(image: np.ndarray, render_pixel: float, edge_um: float) -> tuple[int, int, int] | None:
    """(row, col, size) in render pixels of the ``edge_um`` square of ``image`` that holds the most (its sum: the
    localizations in it), found on the image binned to at most ``SEARCH_PIXELS``; None where the square would cover
    most of the image (over 80 % of its shorter side: nothing to zoom into)."""
    size = round(edge_um * 1000.0 / render_pixel)
    if not 0 < size < 0.8 * min(image.shape):
        return None
    coarse, f = binned(image, SEARCH_PIXELS)
    r, c = (f * v for v in densest_window(coarse, max(1, round(size / f))))
    return r, c, size


def binned(image: np.ndarray, max_side: int) -> tuple[np.ndarray, int]:
    """``image`` summed over ``f`` × ``f`` blocks so that no side exceeds ``max_side`` (``f = 1``: the image
    itself); the last rows/columns that fill no whole block are dropped. Returns the image and ``f``."""
    f = max(1, math.ceil(max(image.shape) / max_side))
    if f == 1:
        return image, 1
    h, w = (n // f for n in image.shape)
    # rows first (each sum adds whole contiguous rows), then columns: 0.003 s against 0.017 s for one sum over axes
    # (1, 3) of a 2560² image on the 2-core AMD EPYC (docs/developers.md)
    rows = image[: h * f, : w * f].reshape(h, f, w * f).sum(axis=1, dtype=np.float32)
    return np.add.reduceat(rows, np.arange(0, w * f, f), axis=1), f


def densest_window(image: np.ndarray, size: int) -> tuple[int, int]:
    """(row, col) of the top-left corner of the ``size`` × ``size`` window with the largest sum (summed-area
    table: every window's sum in one pass)."""
    size = max(1, min(size, *image.shape))
    table = np.pad(image.astype(np.float64).cumsum(0).cumsum(1), ((1, 0), (1, 0)))
    sums = table[size:, size:] - table[:-size, size:] - table[size:, :-size] + table[:-size, :-size]
    r, c = np.unravel_index(int(np.argmax(sums)), sums.shape)
    return int(r), int(c)


def nice_length(target: float) -> float:
    """The largest 1, 2 or 5 x 10^k not above ``target`` (> 0): a scale bar's length."""
    k = math.floor(math.log10(target))
    return max(m * 10.0 ** k for m in NICE if m * 10.0 ** k <= target * (1 + 1e-9))


def length_label(nm: float) -> str:
    """``'500 nm'``, ``'2 µm'``."""
    return f"{nm / 1000:g} µm" if nm >= 1000 else f"{nm:g} nm"


def _round_sig(value: float, up: bool = False, digits: int = 2) -> float:
    """``value`` to ``digits`` significant digits (rounded up with ``up``)."""
    if not value > 0 or not math.isfinite(value):
        return MIN_PIXEL
    unit = 10.0 ** (math.floor(math.log10(value)) + 1 - digits)
    steps = value / unit
    return float(f"{(math.ceil(steps - 1e-9) if up else round(steps)) * unit:.{digits + 1}g}")
