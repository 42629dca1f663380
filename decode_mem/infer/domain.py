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
the model's checkpoint. For a 3-D model trained on a PSF model (``psf: spline`` from a ``psf.h5``, or ``pupil``:
``model_psf``), also the spots' shape: the bright isolated ones fitted with that PSF (``calibrate.psf_shape``), so
that a movie recorded with another PSF (a double helix given to an astigmatic model, a 2-D movie, ...) is warned
about; for a PSF that changes across the field, at the field's centre and its four corners, each against the PSF of
its place (``calibrate.field_shape``), so the warning says where it is off. Each problem is one line with the
numbers; ``DomainCheck.message`` adds the fix. In-domain movies give no warning.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from decode_mem.errors import DecodeMemError
from decode_mem.io.camera import Camera

if TYPE_CHECKING:
    from decode_mem.simulate.spline import SplinePSF

DOMAIN_FRAMES = 10  # consecutive: spots are followed from frame to frame (the flux of a whole frame on) ...
DOMAIN_MIN_FRAMES = 6  # ... down to this many ...
DOMAIN_PIXELS = 6 * 256 * 256  # ... where DOMAIN_FRAMES frames would hold more pixels than this
DOMAIN_PILOT_FRAMES = 2
DOMAIN_SWEEPS = 1
DOMAIN_SIDE = 256  # px: larger frames are checked on their central window (the calibration fits every spot in it)
PSF_FIX = ("calibrate beads recorded on this microscope (python -m decode_mem.psf BEADS --z_step NM --out psf.h5) "
           "and fit a model on that PSF: python -m decode_mem.fit MOVIE --psf psf.h5 --out DIR")
CAMERA_FIX = ("give the camera that recorded the movie (--camera CAM.yaml, or --baseline / --e_per_adu / "
              "--em_gain / --qe / --read_noise / --pixel_size)")
MODEL_FIX = "or fit a model to this movie: python -m decode_mem.fit MOVIE --out DIR"


@dataclass(frozen=True)
class DomainCheck:
    """``warnings``: one line per problem (empty when the movie fits); ``numbers``: what was measured."""

    warnings: tuple[str, ...]
    numbers: dict[str, Any] = field(default_factory=dict)
    camera_suspect: bool = False
    psf_mismatch: bool = False

    @property
    def ok(self) -> bool:
        return not self.warnings

    def message(self, name: str) -> str:
        """One warning for the user: the problems, their numbers and the fix."""
        if self.psf_mismatch:
            fix = (CAMERA_FIX + ", " if self.camera_suspect else "") + PSF_FIX
        else:
            fix = CAMERA_FIX + ", " + MODEL_FIX if self.camera_suspect else MODEL_FIX.removeprefix("or ")
        return f"{name}: outside the model's domain: " + "; ".join(self.warnings) + f". Fix: {fix}"

    def as_dict(self) -> dict[str, Any]:
        return {"warnings": list(self.warnings), "numbers": self.numbers}


@dataclass(frozen=True)
class ModelPsf:
    """The PSF a 3-D model was trained on, for the shape check: the spline (None, with a ``note`` saying why, when
    it cannot be had) and the z range (nm) the model was trained over."""

    psf: SplinePSF | None
    z_range: tuple[float, float]
    note: str = ""


def model_psf(model: Any) -> ModelPsf | None:
    """The PSF of a ``TrainedModel`` trained on a spline or pupil PSF (None for Gaussian PSFs): the spline the
    checkpoint holds, else its ``psf_file``, else (pupil) built from its settings (a few seconds, once per run)."""
    sim = dict(model.simulation)
    if sim.get("psf") not in ("spline", "pupil"):
        return None  # before the imports below: 0.07 s of a 2-D run's start on the 2-core AMX Xeon
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.spline import SplinePSF

    z_range = tuple(float(v) for v in (model.envelope.get("z_range_nm") or sim.get("z_range") or (0.0, 0.0)))
    data = getattr(model, "psf", None)
    field = getattr(model, "psf_field", None)
    if field is not None:  # a PSF that changes across the field: each place's spots against the PSF there
        from decode_mem.simulate.field_spline import FieldSplinePSF

        return ModelPsf(FieldSplinePSF(field, data), z_range)
    if data is not None:
        return ModelPsf(SplinePSF(data), z_range)
    try:
        return ModelPsf(SimulationConfig.from_dict(sim).spline_psf(), z_range)
    except DecodeMemError as e:
        return ModelPsf(None, z_range, note=f"not checked: {e}")


def check_domain(stack: Any, camera: Camera, envelope: dict[str, Any], *, frames: int = DOMAIN_FRAMES,
                 psf: ModelPsf | None = None) -> DomainCheck:
    """Check the first ``frames`` frames of ``stack`` (raw camera counts; fewer for large frames, see the module
    docstring) with ``camera`` against ``envelope``; with ``psf`` (``model_psf``), also the spots' shape."""
    # imported here: a resumed run takes its check from the journal and need not import the calibration (about a
    # second of scipy.optimize and the rest)
    from decode_mem.calibrate import calibrate_movie, covers

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
                                      sweeps=DOMAIN_SWEEPS, light_frames=0)  # the pixels' cumulants: not used here
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
    mismatch = False
    if psf is not None and getattr(psf.psf, "field_shape", None) is not None:
        from decode_mem.calibrate.field_shape import check_field_shape, field_warnings

        found = check_field_shape(stack, camera, psf.psf, psf.z_range, n, pilot_frames=DOMAIN_PILOT_FRAMES,
                                  sweeps=DOMAIN_SWEEPS)
        numbers["psf_shape"] = {k: v if isinstance(v, dict) else v.as_dict() for k, v in found.items()}
        lines = field_warnings(found)
        warnings += lines
        mismatch = bool(lines)
    elif psf is not None:
        shape = _psf_shape(sample, camera, calibration, psf)
        numbers["psf_shape"] = shape if isinstance(shape, dict) else shape.as_dict()
        line = None if isinstance(shape, dict) else shape.warning()
        if line is not None:
            warnings.append(line)
            mismatch = True
    return DomainCheck(tuple(warnings), numbers, camera_suspect=suspect, psf_mismatch=mismatch)


def _psf_shape(sample: np.ndarray, camera: Camera, calibration: Any, psf: ModelPsf) -> Any:
    """The spots of ``sample`` fitted with the model's PSF (a ``PsfShape``), or a dict saying why not."""
    from decode_mem.calibrate.psf_shape import check_psf_shape

    if psf.psf is None:
        return {"note": psf.note}
    t0 = time.perf_counter()
    maps = camera.load_maps(sample.shape[1:]) if camera.has_maps else None
    photons = np.asarray(camera.to_photons(sample, maps), dtype=np.float64)
    shape = check_psf_shape(photons, calibration.diagnostics.localizations,
                            calibration.estimates["psf_sigma_px"].value, psf.psf, psf.z_range, camera,
                            calibration.camera_check.quiet_ratio)
    return dataclasses.replace(shape, seconds=time.perf_counter() - t0)


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
