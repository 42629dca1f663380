"""Physics of a movie measured from its frames: camera sanity, background, PSF width, photons, density,
on-time; the matching simulation settings; and whether a model's training envelope covers the movie.

    cal = calibrate_movie("movie.tif")            # camera from the file's metadata, else the defaults
    cal.estimates["psf_sigma_px"].value, cal.camera_check.warnings
    covers(cal, model.envelope)                   # [] when the model was trained on this physics

The names below are imported on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from decode_mem.calibrate.camera_check import CameraCheck
    from decode_mem.calibrate.core import calibrate_movie
    from decode_mem.calibrate.match import covers, simulation_from_estimates
    from decode_mem.calibrate.metadata import MovieMetadata, read_metadata, resolve_camera
    from decode_mem.calibrate.plot import plot_calibration
    from decode_mem.calibrate.result import Calibration, Estimate, save_calibration

_EXPORTS = {
    "CameraCheck": "camera_check",
    "Calibration": "result",
    "Estimate": "result",
    "calibrate_movie": "core",
    "save_calibration": "result",
    "covers": "match",
    "simulation_from_estimates": "match",
    "MovieMetadata": "metadata",
    "read_metadata": "metadata",
    "resolve_camera": "metadata",
    "plot_calibration": "plot",
}
__all__ = [
    "Calibration",
    "CameraCheck",
    "Estimate",
    "MovieMetadata",
    "calibrate_movie",
    "covers",
    "plot_calibration",
    "read_metadata",
    "resolve_camera",
    "save_calibration",
    "simulation_from_estimates",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
