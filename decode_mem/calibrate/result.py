"""What a calibration is: estimates with uncertainties, the camera and where it came from, the camera check,
the arrays behind the plot; and its YAML."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decode_mem.calibrate.camera_check import CameraCheck
from decode_mem.config import CONFIG_VERSION
from decode_mem.io.camera import Camera
from decode_mem.io.metadata import MovieMetadata


@dataclass(frozen=True)
class Estimate:
    """A measured value and its standard error (None where none is defined)."""

    value: float
    uncertainty: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return {"value": _num(self.value), "uncertainty": _num(self.uncertainty)}


def _num(v: float | None) -> float | None:
    if v is None or not math.isfinite(v):
        return None
    return float(f"{v:.6g}")


@dataclass(frozen=True)
class Diagnostics:
    """Arrays behind the estimates, for the plot: the background map (H, W) photons/px, the photons of
    every trusted localization and of the fully-on ones (``flux``), the σ of the PSF spots, and the mean
    radial PSF profile of those spots (``profile_r`` px, measured ``profile`` and model ``profile_model``,
    per photon); ``localizations``: every fit (``frame`` absolute, ``x``, ``y`` px, ``photons``, ``bg``,
    ``sigma``, ``ok`` trusted, ``psf`` used for the width, ``photometry`` used for the photons)."""

    background_map: np.ndarray
    background_smoothed: np.ndarray
    photons: np.ndarray
    flux: np.ndarray
    sigmas: np.ndarray
    profile_r: np.ndarray
    profile: np.ndarray
    profile_model: np.ndarray
    localizations: dict[str, np.ndarray]


@dataclass(frozen=True)
class Calibration:
    """The result of ``calibrate_movie``; ``to_yaml_dict`` is what ``python -m decode_mem.calibrate`` writes.

    ``estimates`` (value ± standard error, NaN where not measurable in the sample):

    - ``psf_sigma_px`` / ``_nm``: median σ of pixel-integrated Gaussian fits (free σ and constant
      background) to isolated spots (no other candidate within 4σ, window inside the frame), each refitted
      with its neighbours' fitted light removed; ± 1.2533·1.4826·MAD/√n.
    - ``background_photons``: median over pixels of each pixel's mean over its quiet samples (pixel-frames
      farther than ~3σ from every spot detected down to 3x the smoothed noise), photons/px/frame;
      ± the scatter of the sampled blocks' levels.
    - ``background_spread``: 95th / 5th percentile of that map smoothed by a 3 px Gaussian (1: flat);
      ``background_time_ratio``: highest / lowest block level (1: constant in time).
    - ``sensor_pattern_photons``: the pixel-to-pixel spread of that map beyond its noise (each pixel against
      its 8 neighbours, robust; photons): an sCMOS sensor's fixed pattern of offsets and gains left by
      converting with the camera's scalars; about 0 for a uniform sensor or one converted with its maps.
    - ``photons_median``: median photons (per localization per frame) of the trusted fits at least
      max(1.5 px, 2σ) from the frame edge and with no other spot within 2σ; bootstrap ±.
    - ``flux_median``, ``flux_log_sd``: median and robust log-spread (IQR/1.349) of the photons of fully-on
      frames (inside a track: neither its first nor its last frame), i.e. photons per full frame on.
    - ``density_per_um2``: trusted localizations (centre inside the frame) per frame per µm² — detected
      emitters, a lower bound: ones too dim to detect (short or dim on-periods) are not counted.
    - ``on_time_frames``: censoring-corrected mean track length (``blinking``), NaN with < 5 track ends.
    """

    movie: str
    shape: tuple[int, int, int]
    frames_used: int
    camera: Camera
    camera_sources: dict[str, str]
    metadata: MovieMetadata
    estimates: dict[str, Estimate]
    camera_check: CameraCheck
    counts: dict[str, int]
    diagnostics: Diagnostics = field(repr=False)

    def value(self, name: str) -> float:
        return self.estimates[name].value

    def to_yaml_dict(self) -> dict[str, Any]:
        """Plain types only: estimates, camera (usable as ``--camera`` of infer), sources, check, and a
        ``train: simulation:`` section that ``python -m decode_mem.train --config`` reads as it is."""
        from decode_mem.calibrate.match import simulation_from_estimates

        sim = simulation_from_estimates({k: e.value for k, e in self.estimates.items()}, self.camera)
        return {
            "version": CONFIG_VERSION,
            "movie": self.movie,
            "frames": {"total": self.shape[0], "used": self.frames_used, "height": self.shape[1],
                       "width": self.shape[2]},
            "estimates": {k: e.to_dict() for k, e in self.estimates.items()},
            "camera": self.camera.to_dict(),
            "camera_sources": dict(self.camera_sources),
            "metadata_source": self.metadata.source or "none",
            "camera_check": self.camera_check.to_dict(),
            "counts": dict(self.counts),
            "train": {"simulation": sim},
        }


def save_calibration(cal: Calibration, path: str | os.PathLike, extra: Mapping[str, Any] | None = None) -> None:
    """Write ``cal.to_yaml_dict()`` (plus ``extra`` top-level keys) as YAML, atomically."""
    import yaml

    from decode_mem.io.atomic import atomic_output

    data = cal.to_yaml_dict()
    data.update(extra or {})
    with atomic_output(path) as tmp:
        tmp.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
