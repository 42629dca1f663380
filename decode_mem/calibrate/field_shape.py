"""Do a movie's spots look like the PSF of their place in the field? The shape check at the centre and the corners.

For a model of a PSF that changes across the field (``simulate.field_spline``), the bright isolated spots of the
field's centre and of its four corners (squares of ``REGION_SIDE`` px, or a third of the field where that is less)
are found by a quick calibration of each square (``calibrate_movie``) and fitted with the model's PSF *at that
square's centre* (``FieldSplinePSF.at``; the PSF changes little over a square a few % of the field across), as
``calibrate.psf_shape`` fits them. Each square gets its own verdict, so the warning says where the PSF is off
("the top-left corner's spots ..."), as a field PSF calibrated from beads that do not describe the movie's
microscope (another objective, a re-aligned cylindrical lens, a tilted sample holder) shows first at the corners.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from decode_mem.calibrate.psf_shape import PsfShape, check_psf_shape
from decode_mem.errors import DecodeMemError
from decode_mem.io.camera import Camera

REGION_SIDE = 128  # px: the squares checked
REGIONS = ("centre", "top-left corner", "top-right corner", "bottom-left corner", "bottom-right corner")


def region_windows(shape: tuple[int, int], side: int = REGION_SIDE) -> dict[str, tuple[slice, slice]]:
    """(rows, cols) of the squares checked on an (H, W) field: the centre and the four corners."""
    h, w = (int(v) for v in shape[:2])
    s = max(8, min(side, h // 3, w // 3))
    top, left = (h - s) // 2, (w - s) // 2
    return {"centre": (slice(top, top + s), slice(left, left + s)),
            "top-left corner": (slice(0, s), slice(0, s)), "top-right corner": (slice(0, s), slice(w - s, w)),
            "bottom-left corner": (slice(h - s, h), slice(0, s)),
            "bottom-right corner": (slice(h - s, h), slice(w - s, w))}


def check_field_shape(stack: Any, camera: Camera, psf: Any, z_range: tuple[float, float], frames: int, *,
                      pilot_frames: int = 2, sweeps: int = 1) -> dict[str, PsfShape | dict]:
    """Per square (``REGIONS``): the spots' fit with the PSF at that place (a ``PsfShape``), or a dict saying why
    not (too few spots to calibrate, ...). ``stack``: raw frames (T, H, W) of the whole field; the first
    ``frames`` are read, one square at a time."""
    from decode_mem.calibrate import calibrate_movie

    out: dict[str, PsfShape | dict] = {}
    n = min(int(frames), int(stack.shape[0]))
    camera = camera.without_maps() if camera.has_maps else camera  # squares: the camera's scalars (an approximation)
    for region, (rows, cols) in region_windows(stack.shape[1:3]).items():
        sample = np.asarray(stack[0:n, rows, cols])
        t0 = time.perf_counter()
        try:
            cal = calibrate_movie(sample, camera, frames=n, pilot_frames=pilot_frames, sweeps=sweeps, light_frames=0)
        except (DecodeMemError, ValueError, np.linalg.LinAlgError) as e:
            out[region] = {"note": f"not checked: {e}"}
            continue
        cx, cy = (cols.start + cols.stop - 1) / 2, (rows.start + rows.stop - 1) / 2
        photons = np.asarray(camera.to_photons(sample), dtype=np.float64)
        shape = check_psf_shape(photons, cal.diagnostics.localizations, cal.estimates["psf_sigma_px"].value,
                                psf.at_psf(cx, cy), z_range, camera, cal.camera_check.quiet_ratio)
        out[region] = dataclasses.replace(shape, seconds=time.perf_counter() - t0)
    return out


def field_warnings(found: dict[str, PsfShape | dict]) -> list[str]:
    """One line per square whose spots do not look like the PSF there."""
    lines = []
    for region, shape in found.items():
        line = None if isinstance(shape, dict) else shape.warning()
        if line is not None:
            lines.append(f"the {region}'s spots against the model's PSF there: {line}")
    return lines
