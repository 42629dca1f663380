"""Physics of a movie measured from its frames: camera sanity, background, PSF width, photons, density,
on-time; the matching simulation settings; and whether a model's training envelope covers the movie.

    cal = calibrate_movie("movie.tif")            # camera from the file's metadata, else the defaults
    cal.estimates["psf_sigma_px"].value, cal.camera_check.warnings
    covers(cal, model.envelope)                   # [] when the model was trained on this physics

The names below are imported on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.calibrate.camera_check import CameraCheck
    from decode_mem.calibrate.core import calibrate_movie
    from decode_mem.calibrate.match import covers, simulation_from_estimates
    from decode_mem.calibrate.plot import plot_calibration
    from decode_mem.calibrate.result import Calibration, Estimate, save_calibration
    from decode_mem.io.metadata import MovieMetadata, read_metadata, resolve_camera

__all__ = [
    "Calibration", "CameraCheck", "Estimate", "MovieMetadata", "calibrate_movie", "covers", "plot_calibration",
    "read_metadata", "resolve_camera", "save_calibration", "simulation_from_estimates",
]
__getattr__, __dir__ = lazy_exports(__name__, {
    "CameraCheck": "camera_check", "calibrate_movie": "core", "covers": "match",
    "simulation_from_estimates": "match", "MovieMetadata": "decode_mem.io.metadata",
    "read_metadata": "decode_mem.io.metadata", "resolve_camera": "decode_mem.io.metadata", "plot_calibration": "plot",
    "Calibration": "result", "Estimate": "result",
    "save_calibration": "result",
})
