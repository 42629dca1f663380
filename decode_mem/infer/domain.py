"""Does a movie fit the model? A quick calibration of its first frames against the model's training envelope.

On the first frames of a stack (``DOMAIN_FRAMES``, fewer — down to ``DOMAIN_MIN_FRAMES`` — where they would
hold more than ``DOMAIN_PIXELS`` px) with a quick ``decode_mem.calibrate`` (the first PSF width from
``DOMAIN_PILOT_FRAMES`` frames and one refit sweep instead of 20 and 2: on 256² frames 2.4x less CPU than 10
frames fully calibrated, within a few % of their numbers, far inside the envelope's tolerances,
benchmarks/results/stack_cost.md; of frames larger than
``DOMAIN_SIDE`` px, their central ``DOMAIN_SIDE`` x ``DOMAIN_SIDE`` px, so that the check's memory does not
grow with the frame size; whole frames when the camera has per-pixel maps): all-zero frames, pixels below
the camera baseline and the camera's noise (a wrong camera shows here), the background level and how much it
varies across the field, the PSF width and the photons per emitter — compared with the envelope stored in
the model's checkpoint. Each problem is one line with the numbers; ``DomainCheck.message`` adds the fix.
In-domain movies give no warning.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decode_mem.calibrate import calibrate_movie, covers
from decode_mem.errors import DecodeMemError
from decode_mem.io.camera import Camera

DOMAIN_FRAMES = 10  # consecutive: spots are followed from frame to frame (the flux of a whole frame on) ...
DOMAIN_MIN_FRAMES = 6  # ... down to this many ...
DOMAIN_PIXELS = 6 * 256 * 256  # ... where DOMAIN_FRAMES frames would hold more pixels than this
DOMAIN_PILOT_FRAMES = 2
DOMAIN_SWEEPS = 1
DOMAIN_SIDE = 256  # px: larger frames are checked on their central window (the calibration fits every spot in it)
CAMERA_FIX = ("give the camera that recorded the movie (--camera CAM.yaml, or --baseline / --e_per_adu / "
              "--em_gain / --qe / --read_noise / --pixel_size)")
MODEL_FIX = "or fit a model to this movie: python -m decode_mem.fit MOVIE --out DIR"


@dataclass(frozen=True)
class DomainCheck:
    """``warnings``: one line per problem (empty when the movie fits); ``numbers``: what was measured."""

    warnings: tuple[str, ...]
    numbers: dict[str, Any] = field(default_factory=dict)
    camera_suspect: bool = False

    @property
    def ok(self) -> bool:
        return not self.warnings

    def message(self, name: str) -> str:
        """One warning for the user: the problems, their numbers and the fix."""
        fix = CAMERA_FIX + ", " + MODEL_FIX if self.camera_suspect else MODEL_FIX.removeprefix("or ")
        return f"{name}: outside the model's domain: " + "; ".join(self.warnings) + f". Fix: {fix}"

    def as_dict(self) -> dict[str, Any]:
        return {"warnings": list(self.warnings), "numbers": self.numbers}


def check_domain(stack: Any, camera: Camera, envelope: dict[str, Any], *, frames: int = DOMAIN_FRAMES) -> DomainCheck:
    """Check the first ``frames`` frames of ``stack`` (raw camera counts; fewer for large frames, see the module
    docstring) with ``camera`` against ``envelope``."""
    window = _central(stack.shape[1:], camera)
    h, w = (len(range(*s.indices(int(n)))) for s, n in zip(window, stack.shape[1:3], strict=True))
    n = min(int(frames), int(stack.shape[0]), max(DOMAIN_MIN_FRAMES, DOMAIN_PIXELS // max(1, h * w)))
    sample = np.asarray(stack[(slice(0, n), *window)])
    if not np.any(sample):
        return DomainCheck((f"all pixels of the first {n} frames are 0 (an empty or failed recording?)",),
                           {"frames": n, "max_adu": 0.0}, camera_suspect=True)
    warnings: list[str] = []
    below = float(np.mean(sample < camera.baseline))
    numbers: dict[str, Any] = {"frames": n, "below_baseline": round(below, 4)}
    t0 = time.perf_counter()
    try:
        calibration = calibrate_movie(sample, camera, frames=n, pilot_frames=DOMAIN_PILOT_FRAMES,
                                      sweeps=DOMAIN_SWEEPS)
    except (DecodeMemError, ValueError, np.linalg.LinAlgError) as e:  # too few spots to measure, ...
        numbers["calibration"] = f"not measured: {e}"
        if below > 0.5:
            warnings.append(f"{below:.0%} of the pixels are below the camera baseline {camera.baseline:g} ADU")
        return DomainCheck(tuple(warnings), numbers, camera_suspect=bool(warnings))
    estimates = {k: e.value for k, e in calibration.estimates.items()}
    numbers.update({k: _plain(v) for k, v in estimates.items()})
    numbers["seconds"] = round(time.perf_counter() - t0, 3)
    check = calibration.camera_check
    numbers["camera_noise_ratio"] = _plain(check.noise_ratio)
    suspect = not check.ok or below > 0.5
    if not check.ok:  # the camera check's own sentences say what is off and what the data suggest
        warnings += check.warnings
    elif below > 0.5:
        warnings.append(f"{below:.0%} of the pixels are below the camera baseline {camera.baseline:g} ADU")
    warnings += covers(calibration, envelope)
    return DomainCheck(tuple(warnings), numbers, camera_suspect=suspect)


def _central(shape: tuple[int, ...], camera: Camera) -> tuple[slice, slice]:
    """The central ``DOMAIN_SIDE`` px of each axis (all of it with per-pixel camera maps, sized for whole frames)."""
    if camera.has_maps:
        return slice(None), slice(None)
    sides = [(int(n), min(int(n), DOMAIN_SIDE)) for n in shape[:2]]
    return tuple(slice((n - side) // 2, (n - side) // 2 + side) for n, side in sides)


def _plain(v: Any) -> Any:
    if isinstance(v, (float, np.floating)):
        return round(float(v), 4) if math.isfinite(v) else None
    return v
