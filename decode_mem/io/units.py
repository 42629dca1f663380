"""Positions between a file's units and a table's: each localization format's own nm origin and pixel.

A table's positions are in pixels of ``unit`` nm with pixel centres at integer coordinates (DESIGN.md §3): the
camera's pixel for a file that records one, or 1 nm (``NM_UNIT``) for a table in nm whose camera pixel is not
known. Files in nm measure from different origins, each a fixed number of camera pixels from the centre of the
first pixel: ``nm = (px + origin) * camera`` with ``origin`` 0.5 for ThunderSTORM, parquet, ShareLoc and
rapidSTORM (the outer corner), 1 for SMAP (MATLAB's 1-based pixels) and 0 for DECODE's nm. Where the camera
pixel is not known, nm are kept as they are (the outer corner is taken as their origin).

The conversions are written so that a float32 table position goes to the file and back to the same float32 (the
file holding float64): ``unit == camera`` takes one product or quotient each way.
"""

from __future__ import annotations

import numpy as np

NM_UNIT = 1.0  # nm: the table unit of a file in nm whose camera pixel is not known
CORNER = 0.5  # camera px from the first pixel's centre to the image's outer corner


def nm_from_table(x: np.ndarray, unit: float, camera: float | None, origin: float = CORNER) -> np.ndarray:
    """Positions of a table in ``unit`` pixels as a format's nm (float64); ``camera`` None: nm from the corner."""
    x = np.asarray(x, np.float64)
    if camera is None or origin == CORNER:
        return (x + CORNER) * unit
    if unit == camera:
        return (x + origin) * camera
    return ((x + CORNER) * (unit / camera) - CORNER + origin) * camera


def table_from_nm(nm: np.ndarray, unit: float, camera: float | None, origin: float = CORNER) -> np.ndarray:
    """Inverse of :func:`nm_from_table` (float64)."""
    nm = np.asarray(nm, np.float64)
    if camera is None or origin == CORNER:
        return nm / unit - CORNER
    if unit == camera:
        return nm / camera - origin
    return (nm / camera - origin + CORNER) * (camera / unit) - CORNER


def px_from_table(x: np.ndarray, unit: float, camera: float) -> np.ndarray:
    """Positions in ``unit`` pixels as camera pixels (float64): the outer corner stays at -0.5."""
    x = np.asarray(x, np.float64)
    return x if unit == camera else (x + CORNER) * (unit / camera) - CORNER


def table_from_px(px: np.ndarray, camera: float, unit: float) -> np.ndarray:
    """Inverse of :func:`px_from_table` (float64)."""
    px = np.asarray(px, np.float64)
    return px if unit == camera else (px + CORNER) * (camera / unit) - CORNER
