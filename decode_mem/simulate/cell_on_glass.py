"""A cell on glass as a fixed background field (photons/px): calibration's hardest common background.

The simulator's cell-like backgrounds (``noise.cell_field``) are random textures; this one is a fixed, known
field — glass on the left, a smooth rise to the cell body and a bright nucleus on the right — so that a test or
benchmark can put bright spots on a background rising from ~80 to ~900 photons/px and know the truth at every
pixel.
"""

from __future__ import annotations

import numpy as np


def cell_on_glass(h: int, w: int, lo: float = 80.0, hi: float = 900.0) -> np.ndarray:
    """(H, W) photons/px: ``lo`` on the left, a smooth rise over the middle of the frame to the cell body and a
    bright nucleus on the right, ``hi`` at its top."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    ramp = np.clip((x - 0.15 * w) / (0.7 * w), 0, 1)
    ramp = ramp * ramp * (3 - 2 * ramp)
    nucleus = np.exp(-((x - 0.7 * w) ** 2 + (y - 0.5 * h) ** 2) / (2 * (0.15 * w) ** 2))
    f = 0.55 * ramp + 0.45 * nucleus * ramp
    return (lo + (hi - lo) * f / f.max()).astype(np.float32)
