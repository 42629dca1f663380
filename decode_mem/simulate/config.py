"""SimulationConfig: every knob of the SMLM simulator, validated, with ``from_dict``/``to_dict`` for YAML.

Units (DESIGN.md §3): sizes and positions in camera pixels, z in nm, intensities in photons, time in
frames, density in emitters per µm² of sample (the camera's ``pixel_size`` converts).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any

import numpy as np

from decode_mem.config import Z_REFERENCES, check_choice, check_keys
from decode_mem.errors import ConfigError
from decode_mem.io.camera import Camera
from decode_mem.simulate import derived
from decode_mem.simulate.field_pupil import FieldAberrations
from decode_mem.simulate.structures import StructureConfig

PSFS = ("gauss2d", "astig3d", "spline", "pupil")
BG_MODES = ("uniform", "smooth", "cell", "mixed")
RANGE_DISTS = ("uniform", "loguniform")  # how a (low, high) range is drawn
PHOTON_DISTS = ("normal", "lognormal", "uniform", "loguniform")
CAMERA_KINDS = ("emccd", "scmos")


def _pair(value: Any, name: str, cast: type = float) -> tuple:
    """A scalar becomes (v, v); a list/tuple of two stays two; anything else is a ConfigError."""
    if isinstance(value, (list, tuple, np.ndarray)):
        if len(value) != 2:
            raise ConfigError(f"simulation.{name} must be one value or a pair, got {value!r}")
        items = tuple(value)
    else:
        items = (value, value)
    try:
        out = tuple(cast(v) for v in items)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"simulation.{name} must be numbers, got {value!r}") from e
    if cast is float and not all(math.isfinite(v) for v in out):
        raise ConfigError(f"simulation.{name} must be finite, got {value!r}")
    return out


@dataclass(frozen=True)
class AstigmatismCalibration:
    """Defocus model of an astigmatic PSF, per axis (x, y):

    ``σ(z) = σ0·sqrt(1 + u² + cubic·u³ + quartic·u⁴)`` with ``u = (z − focal_offset)/depth``.
    The x focus sits at ``+c`` and the y focus at ``−c`` by default (DECODE's GaussianPSF: c = 250 nm,
    d = 280 nm); all values in nm except the dimensionless ``cubic``/``quartic``.
    """

    focal_offset: tuple[float, float] = (250.0, -250.0)
    depth: tuple[float, float] = (280.0, 280.0)
    cubic: tuple[float, float] = (0.0, 0.0)
    quartic: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        for name in ("focal_offset", "depth", "cubic", "quartic"):
            object.__setattr__(self, name, _pair(getattr(self, name), f"astigmatism.{name}"))
        if min(self.depth) <= 0:
            raise ConfigError(f"simulation.astigmatism.depth must be > 0 nm, got {self.depth!r}")

    @classmethod
    def from_dict(cls, params: dict[str, Any]) -> AstigmatismCalibration:
        params = dict(params or {})
        check_keys(cls, params, "simulation.astigmatism")
        return cls(**params)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: list(getattr(self, f.name)) for f in fields(self)}

    def sigma_scale(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """σx(z)/σ0 and σy(z)/σ0 (numpy; the torch version lives in ``psf.astig_sigma``)."""
        z = np.asarray(z, dtype=np.float64)
        out = []
        for axis in range(2):
            u = (z - self.focal_offset[axis]) / self.depth[axis]
            q = 1 + u**2 + self.cubic[axis] * u**3 + self.quartic[axis] * u**4
            out.append(np.sqrt(np.maximum(q, 1e-4)))
        return out[0], out[1]


@dataclass(frozen=True)
class PupilConfig:
    """A scalar pupil-function PSF (``decode_mem.simulate.pupil``): numerical aperture, emission wavelength (nm),
    immersion index, and aberrations in waves RMS: ``astigmatism`` Z(2,2) (a cylindrical lens), ``spherical``
    Z(4,0), ``coma`` Z(3,1); ``helix_zones`` > 0 adds a double-helix phase mask (Fresnel zones of vortices
    (2n+1)·θ in ρ² zones), whose two lobes turn with z."""

    na: float = 1.45
    wavelength: float = 670.0
    n_immersion: float = 1.518
    astigmatism: float = 0.12
    spherical: float = 0.0
    coma: float = 0.0
    helix_zones: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name != "helix_zones":
                object.__setattr__(self, f.name, _float(getattr(self, f.name), f"pupil.{f.name}"))
        object.__setattr__(self, "helix_zones", _int(self.helix_zones, "pupil.helix_zones"))
        if self.helix_zones < 0:
            raise ConfigError(f"simulation.pupil.helix_zones must be >= 0, got {self.helix_zones!r}")
        if not 0 < self.na < self.n_immersion:
            raise ConfigError(f"simulation.pupil.na must be in (0, n_immersion), got {self.na!r}")
        if not self.wavelength > 0:
            raise ConfigError(f"simulation.pupil.wavelength must be > 0 nm, got {self.wavelength!r}")

    @classmethod
    def from_dict(cls, params: dict[str, Any]) -> PupilConfig:
        params = dict(params or {})
        check_keys(cls, params, "simulation.pupil")
        return cls(**params)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class SimulationConfig:
    """What to simulate. Construct directly, or ``SimulationConfig.from_dict(yaml_mapping)``.

    - ``frame_size``: (H, W) in px.
    - ``density``: mean number of emitters visible (on for any part of the frame) per frame per µm².
    - ``density_range``: (low, high) emitters/µm²; one density per movie (training sample) drawn from
      ``density_dist`` ('loguniform' or 'uniform') instead of ``density``. ``pixel_size_range``: (low, high)
      nm; one pixel size per movie drawn uniformly instead of ``camera.pixel_size`` (it converts the density
      to emitters per px²).
    - ``photons_*``: flux of an emitter, photons per *full* frame on; drawn from ``photons_dist``
      ('normal' | 'lognormal' | 'uniform') with the given mean and std, clipped below at ``photons_min``,
      or log-uniformly in ``photons_range`` ('loguniform').
    - ``on_time``: mean of the exponential on-time, in frames; ``on_time_range`` (low, high) draws one mean
      per movie log-uniformly instead.
    - ``bg``: background in photons/px, one value or a (low, high) range from which one level per sample
      (training window) or per movie is drawn (``bg_dist``: 'uniform' or 'loguniform'). ``bg_mode``:
      'uniform'; 'smooth' modulates that level by a random low-frequency field
      ``level·(1 + bg_smooth_amplitude·f)``, ``f`` in [−1, 1], correlation length ~``bg_smooth_scale`` px;
      'cell' is a cell-like field (gradient, smooth field and bright blobs of ~``bg_smooth_scale`` px,
      ``bg_smooth_amplitude`` × 1–10 times brighter than the glass at their centre) whose median is the level;
      'mixed' picks one of the three per movie. ``bg_bleach``: movies only, the fraction of the background
      lost per 1000 frames (exponential decay).
    - ``psf``: 'gauss2d' (pixel-integrated Gaussian, z = 0) or 'astig3d' (astigmatic Gaussian, z uniform in
      ``z_range`` nm); ``psf_sigma`` is σ0 in px (one value or (σx0, σy0)); ``psf_sigma_range`` (low, high)
      draws one σ0 per movie uniformly instead; ``psf_sigma_jitter`` is the relative per-emitter spread of σ.
      'spline': the measured cubic-spline PSF in ``psf_file`` (``python -m decode_mem.psf``), z uniform in
      ``z_range``, which must lie inside the file's valid range; ``psf_sigma``/``_range`` do not apply, the
      jitter scales the spline's lateral size. 'pupil': an aberrated pupil-function PSF (``pupil``, a mapping of
      ``PupilConfig``), rendered through a spline made on first use; ``pupil_field`` (a mapping of
      ``field_pupil.FieldAberrations``) makes it change across the frame (the frame is the field). A
      ``psf_file`` made from beads spread over the field may change across it too (``field_shape``: training
      windows then lie at random places of that field, ``field_psf``).
    - ``margin``: emitters are placed uniformly over the frame extended by this many px on every side, so
      that emitters just outside contribute light at the edges. Ground truth lists only emitters whose
      centre is inside the frame.
    - ``max_emitters``: K, the padded length of a training sample's emitter list (None: from the density).
    - ``camera``: the noise model and pixel size (``Camera.emccd()`` or ``Camera.scmos()``).
      ``camera_kinds``: draw a camera per movie from these kinds ('emccd', 'scmos') with random realistic
      settings (``decode_mem.simulate.physics``) instead; frames are converted back to photons with it.
    - ``sensor_variation``: sCMOS only; relative per-pixel spread of gain, read noise and offset (0: none);
      ``sensor_variation_range`` (low, high) draws one spread per sample (training window or movie) uniformly
      instead, 0 allowed (a network for a camera whose maps are not known: uniform sensors and varied ones).
      ``maps_known``: the probability that a training sample is converted to photons with its per-pixel maps
      (as a user with calibration maps would) rather than with the camera's scalars.
    - ``structure``: movies only; 'none' (default: the uniform emitters above), or 'filaments' | 'rings' |
      'grids' (or a mapping of ``StructureConfig`` fields): fixed sites that blink again and again, so
      ``density`` is not used (``decode_mem.simulate.structures``). Training windows stay uniform.
    - ``drift_nm``: movies only; a smooth stage drift of about this many nm every ``drift_frames`` frames,
      applied to every emitter and recorded in the ground truth (``decode_mem.simulate.stage_drift``).
    - ``z_reference``: what the z of a training window's emitters (``"em"``) is measured from: 'absolute' (the
      emitter's z), or 'focal_plane' (a PSF that changes across the field only: z minus the focal shift at the
      emitter's place in the field, ``field_psf().focal_shift``). A network trained so reads z from the focal plane
      where each spot is, which the PSF file knows exactly, instead of learning the shift from the field
      coordinates; inference adds the shift back (``ModelConfig.z_reference``). Movies' ground truth stays
      absolute.
    """

    frame_size: tuple[int, int] = (64, 64)
    density: float = 1.0
    photons_mean: float = 5000.0
    photons_std: float = 1500.0
    photons_dist: str = "normal"
    photons_min: float = 1.0
    photons_range: tuple[float, float] = (500.0, 20000.0)
    on_time: float = 2.0
    on_time_range: tuple[float, float] | None = None
    bg: tuple[float, float] = (100.0, 100.0)
    bg_dist: str = "uniform"
    bg_mode: str = "uniform"
    bg_smooth_amplitude: float = 0.5
    bg_smooth_scale: float = 16.0
    bg_bleach: float = 0.0
    psf: str = "gauss2d"
    psf_sigma: tuple[float, float] = (1.0, 1.0)
    psf_sigma_range: tuple[float, float] | None = None
    psf_sigma_jitter: float = 0.0
    psf_file: str | None = None
    pupil: PupilConfig = field(default_factory=PupilConfig)
    pupil_field: FieldAberrations | None = None
    density_range: tuple[float, float] | None = None
    density_dist: str = "loguniform"
    pixel_size_range: tuple[float, float] | None = None
    astigmatism: AstigmatismCalibration = field(default_factory=AstigmatismCalibration)
    z_range: tuple[float, float] = (-750.0, 750.0)
    margin: float = 3.0
    max_emitters: int | None = None
    camera: Camera = field(default_factory=Camera.emccd)
    camera_kinds: tuple[str, ...] = ()
    sensor_variation: float = 0.0
    sensor_variation_range: tuple[float, float] | None = None
    maps_known: float = 1.0
    structure: StructureConfig = field(default_factory=StructureConfig)
    drift_nm: float = 0.0
    drift_frames: float = 1000.0
    z_reference: str = "absolute"

    def __post_init__(self) -> None:
        def fix(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        size = _pair(self.frame_size, "frame_size", cast=_int)
        if min(size) <= 0:
            raise ConfigError(f"simulation.frame_size must be two positive integers (H, W), got {self.frame_size!r}")
        fix("frame_size", size)
        for name in ("density", "photons_mean", "photons_std", "photons_min", "on_time", "bg_smooth_amplitude",
                     "bg_smooth_scale", "margin", "sensor_variation", "bg_bleach", "psf_sigma_jitter",
                     "maps_known", "drift_nm", "drift_frames"):
            fix(name, _float(getattr(self, name), name))
        if self.density < 0:
            raise ConfigError(f"simulation.density must be >= 0 emitters/µm², got {self.density!r}")
        if self.photons_mean <= 0:
            raise ConfigError(f"simulation.photons_mean must be > 0 photons, got {self.photons_mean!r}")
        if self.photons_std < 0:
            raise ConfigError(f"simulation.photons_std must be >= 0 photons, got {self.photons_std!r}")
        if self.photons_min <= 0:
            raise ConfigError(f"simulation.photons_min must be > 0 photons, got {self.photons_min!r}")
        check_choice("simulation.photons_dist", self.photons_dist, PHOTON_DISTS)
        if self.on_time <= 0:
            raise ConfigError(f"simulation.on_time must be > 0 frames, got {self.on_time!r}")
        bg = _pair(self.bg, "bg")
        if not 0 <= bg[0] <= bg[1]:
            raise ConfigError(f"simulation.bg must be >= 0 photons/px, as one value or (low, high) with "
                              f"low <= high, got {self.bg!r}")
        fix("bg", bg)
        for name in ("bg_dist", "density_dist"):
            check_choice(f"simulation.{name}", getattr(self, name), RANGE_DISTS)
        if self.bg_dist == "loguniform" and bg[0] <= 0:
            raise ConfigError(f"simulation.bg must be > 0 for bg_dist 'loguniform', got {self.bg!r}")
        if not 0 <= self.bg_bleach < 1:
            raise ConfigError(f"simulation.bg_bleach must be in [0, 1), got {self.bg_bleach!r}")
        fix("photons_range", _range(self.photons_range, "photons_range"))
        for name in ("psf_sigma_range", "density_range", "pixel_size_range", "on_time_range"):
            if getattr(self, name) is not None:
                fix(name, _range(getattr(self, name), name))
        if not 0 <= self.psf_sigma_jitter < 0.5:
            raise ConfigError(f"simulation.psf_sigma_jitter must be in [0, 0.5), got {self.psf_sigma_jitter!r}")
        if not 0 <= self.maps_known <= 1:
            raise ConfigError(f"simulation.maps_known is a probability in [0, 1], got {self.maps_known!r}")
        kinds = (self.camera_kinds,) if isinstance(self.camera_kinds, str) else tuple(self.camera_kinds or ())
        if any(k not in CAMERA_KINDS for k in kinds):
            raise ConfigError(f"simulation.camera_kinds must be a list of {CAMERA_KINDS}, got {self.camera_kinds!r}")
        fix("camera_kinds", kinds)
        check_choice("simulation.bg_mode", self.bg_mode, BG_MODES)
        if not 0 <= self.bg_smooth_amplitude <= 1:
            raise ConfigError(f"simulation.bg_smooth_amplitude must be in [0, 1], got {self.bg_smooth_amplitude!r}")
        if self.bg_smooth_scale <= 0:
            raise ConfigError(f"simulation.bg_smooth_scale must be > 0 px, got {self.bg_smooth_scale!r}")
        check_choice("simulation.psf", self.psf, PSFS)
        sigma = _pair(self.psf_sigma, "psf_sigma")
        if min(sigma) <= 0:
            raise ConfigError(f"simulation.psf_sigma must be > 0 px, got {self.psf_sigma!r}")
        fix("psf_sigma", sigma)
        if isinstance(self.astigmatism, dict):
            fix("astigmatism", AstigmatismCalibration.from_dict(self.astigmatism))
        elif not isinstance(self.astigmatism, AstigmatismCalibration):
            raise ConfigError(f"simulation.astigmatism must be a mapping, got {self.astigmatism!r}")
        z_range = _pair(self.z_range, "z_range")
        if z_range[0] > z_range[1]:
            raise ConfigError(f"simulation.z_range must be (low, high) nm with low <= high, got {self.z_range!r}")
        fix("z_range", z_range)
        if isinstance(self.pupil, dict):
            fix("pupil", PupilConfig.from_dict(self.pupil))
        elif not isinstance(self.pupil, PupilConfig):
            raise ConfigError(f"simulation.pupil must be a mapping, got {self.pupil!r}")
        if isinstance(self.pupil_field, dict):
            fix("pupil_field", FieldAberrations.from_dict(self.pupil_field))
        elif self.pupil_field is not None and not isinstance(self.pupil_field, FieldAberrations):
            raise ConfigError(f"simulation.pupil_field must be a mapping, got {self.pupil_field!r}")
        if self.pupil_field is not None and self.psf != "pupil":
            raise ConfigError(f"simulation.pupil_field is for psf 'pupil', not {self.psf!r}")
        self._check_psf_file()
        check_choice("simulation.z_reference", self.z_reference, Z_REFERENCES)
        if self.z_reference == "focal_plane" and self.field_shape is None:
            raise ConfigError("simulation.z_reference 'focal_plane' is for a PSF that changes across the field "
                              "(a psf_file made from beads over the field, or pupil_field)")
        if self.margin < 0:
            raise ConfigError(f"simulation.margin must be >= 0 px, got {self.margin!r}")
        if self.max_emitters is not None:
            k = _int(self.max_emitters, "max_emitters")
            if k < 1:
                raise ConfigError(f"simulation.max_emitters must be >= 1 or null (automatic), got {k!r}")
            fix("max_emitters", k)
        fix("camera", _camera(self.camera))
        fix("structure", StructureConfig.parse(self.structure))
        if self.drift_nm < 0 or self.drift_frames <= 0:
            raise ConfigError(f"simulation.drift_nm must be >= 0 nm and drift_frames > 0, got {self.drift_nm!r}, "
                              f"{self.drift_frames!r}")
        if self.sensor_variation < 0 or self.sensor_variation >= 1:
            raise ConfigError(f"simulation.sensor_variation must be in [0, 1), got {self.sensor_variation!r}")
        if self.sensor_variation_range is not None:
            spread = _pair(self.sensor_variation_range, "sensor_variation_range")
            if not 0 <= spread[0] <= spread[1] < 1:
                raise ConfigError("simulation.sensor_variation_range must be (low, high) with 0 <= low <= high < 1, "
                                  f"got {self.sensor_variation_range!r}")
            fix("sensor_variation_range", spread)

    def _check_psf_file(self) -> None:
        """psf 'spline' needs a readable ``psf_file`` whose valid z range holds ``z_range``; others take none."""
        if self.psf == "pupil" and self.psf_sigma_range is not None:
            raise ConfigError("simulation.psf_sigma_range does not apply to psf 'pupil'")
        if self.psf != "spline":
            if self.psf_file is not None:
                raise ConfigError(f"simulation.psf_file is for psf 'spline', not {self.psf!r}")
            return
        if not self.psf_file:
            raise ConfigError("simulation.psf 'spline' needs simulation.psf_file (a psf.h5 from python -m "
                              "decode_mem.psf)")
        from pathlib import Path

        path = str(Path(self.psf_file).expanduser().resolve())
        object.__setattr__(self, "psf_file", path)
        stat = os.stat(path) if os.path.isfile(path) else None
        header = (_file_header.__wrapped__(path, 0, 0, 0) if stat is None  # not a file: its error, not cached
                  else _file_header(path, stat.st_mtime_ns, stat.st_size, stat.st_ino))
        lo, hi = header["z_range"]
        if self.z_range[0] < lo - 1e-6 or self.z_range[1] > hi + 1e-6:
            raise ConfigError(f"simulation.z_range {list(self.z_range)} nm is outside the range {path} is valid "
                              f"for ({lo:g} to {hi:g} nm)")
        if self.psf_sigma_range is not None:
            raise ConfigError("simulation.psf_sigma_range does not apply to psf 'spline' (the file sets the width)")
        object.__setattr__(self, "_psf_header", header)

    def spline_psf(self):
        """The spline PSF of ``psf_file`` (or of the pupil), on the CPU (``.to(device)`` caches copies); one
        object for every config of the same unchanged file (``_file_spline``)."""
        cached = self.__dict__.get("_spline")
        if cached is None:
            if self.psf == "pupil":
                cached = _pupil_spline(self.pupil, self.z_range, self.camera.pixel_size)
            else:
                cached = file_spline(self.psf_file)
            object.__setattr__(self, "_spline", cached)
        return cached

    def field_psf(self):
        """The PSF that changes across the field (``pupil_field``, or a ``psf_file`` with a field part:
        ``simulate.field_pupil`` / ``simulate.field_spline``), or None where the PSF is the same everywhere."""
        if "_field" not in self.__dict__:
            found = None
            if self.psf == "pupil" and self.pupil_field is not None:
                from decode_mem.simulate.field_pupil import FieldPupilPSF

                found = FieldPupilPSF(self.pupil, self.pupil_field, self.frame_size, self.z_range,
                                      self.camera.pixel_size)
            elif self.psf == "spline" and self.psf_header().get("field_shape") is not None:
                found = file_field(self.psf_file)
            object.__setattr__(self, "_field", found)
        return self.__dict__["_field"]

    @property
    def field_shape(self) -> tuple[int, int] | None:
        """(H, W) px of the field the PSF changes over (None: the same PSF everywhere)."""
        if self.psf == "pupil" and self.pupil_field is not None:
            return self.frame_size
        if self.psf == "spline":
            shape = self.psf_header().get("field_shape")
            return None if shape is None else (int(shape[0]), int(shape[1]))
        return None

    def psf_header(self) -> dict[str, Any]:
        """The spline's shape, centre and width curves (psf 'spline': the file's header; 'pupil': built)."""
        if self.psf == "pupil" and "_psf_header" not in self.__dict__:
            d = self.spline_psf().data  # the pupil spline is built once, shared with rendering
            object.__setattr__(self, "_psf_header", {
                "x0": d.x0, "y0": d.y0, "upsample": d.upsample, "shape": d.shape, "z_range": d.z_range,
                "widths": (d.width_z, d.width_x, d.width_y)})
        return self.__dict__["_psf_header"]

    # ---- YAML -----------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, params: dict[str, Any] | None, *, source: str = "simulation") -> SimulationConfig:
        """Strict: an unknown key is an error that names it and suggests the closest known key.

        ``camera`` may be a mapping of Camera fields, or ``"emccd"``/``"scmos"`` for the presets.
        """
        params = dict(params or {})
        check_keys(cls, params, source)
        return cls(**params)

    def to_dict(self) -> dict[str, Any]:
        """Plain Python types only (lists, not tuples), so ``yaml.safe_dump`` writes it."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = list(value)
            elif hasattr(value, "to_dict"):
                value = value.to_dict()
            out[f.name] = value
        return out

    # ---- derived quantities ---------------------------------------------------------------------------
    @property
    def height(self) -> int:
        return self.frame_size[0]

    @property
    def width(self) -> int:
        return self.frame_size[1]

    @property
    def is_3d(self) -> bool:
        return self.psf in ("astig3d", "spline", "pupil")

    @property
    def um2_per_px(self) -> float:
        return (self.camera.pixel_size / 1000.0) ** 2

    @property
    def density_bounds(self) -> tuple[float, float]:
        """(low, high) emitters/µm² over the movies this config makes."""
        return self.density_range if self.density_range is not None else (self.density, self.density)

    @property
    def pixel_size_bounds(self) -> tuple[float, float]:
        """(low, high) pixel size in nm over the movies this config makes."""
        p = self.camera.pixel_size
        return self.pixel_size_range if self.pixel_size_range is not None else (p, p)

    # ---- the physics this config implies (formulas: decode_mem.simulate.derived) -------------------------
    @property
    def max_density_px(self) -> float:
        """The largest density in emitters per px² any movie of this config gets."""
        return derived.max_density_px(self)

    @property
    def extent(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """((x_low, x_high), (y_low, y_high)) in px of the area emitters are placed in (frame + margin)."""
        return derived.extent(self)

    @property
    def emitters_per_frame(self) -> float:
        """Expected number of emitters visible in a frame, over the whole placement area (frame + margin)."""
        return derived.emitters_per_frame(self)

    @property
    def expected_in_frame(self) -> float:
        """Expected number of emitters visible in a frame with their centre inside the frame."""
        return derived.expected_in_frame(self)

    def start_rate_for(self, density_px: float, on_time: float | None = None) -> float:
        """Emitters switching on per frame for ``density_px`` emitters/px² (``derived.start_rate_for``)."""
        return derived.start_rate_for(self, density_px, on_time)

    @property
    def start_rate(self) -> float:
        """Emitters switching on per frame over the placement area (``derived.start_rate``)."""
        return derived.start_rate(self)

    @property
    def k_max(self) -> int:
        """K, the target slots per frame: ``max_emitters`` or automatic (``derived.k_max``)."""
        return derived.k_max(self)

    def sigma0_bounds(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """((σx0 low, high), (σy0 low, high)) in px over the movies of this config (in focus)."""
        return derived.sigma0_bounds(self)

    def sigma_range(self) -> tuple[float, float]:
        """(smallest, largest) σ in px over both axes, the z range, the movies and the per-emitter spread."""
        return derived.sigma_range(self)

    def envelope(self) -> dict[str, Any]:
        """The physics this config covers, stored with every trained model (``derived.envelope``)."""
        return derived.envelope(self)

    @property
    def patch_size(self) -> int:
        """Edge of the square patch a spot is rendered into (``derived.patch_size``)."""
        return derived.patch_size(self)


def file_spline(path: str) -> Any:
    """The SplinePSF (CPU) of the PSF file ``path``, read once per unchanged file (``_file_spline``); shared by
    the configs that render it and the checkpoints that store it. A missing file is a ConfigError naming it."""
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: PSF file not found")
    stat = os.stat(path)
    return _file_spline(path, stat.st_mtime_ns, stat.st_size, stat.st_ino)


@lru_cache(maxsize=4)
def _file_spline(path: str, mtime_ns: int, size: int, inode: int) -> Any:
    """The SplinePSF of a PSF file, shared by every config that names the same unchanged file (the key: path,
    modification time, size, inode: a rewritten file is read anew). Training copies its config for every batch
    (``dataclasses.replace``: the size jitter); each copy reading the file's coefficients again (~20 MB for a
    bead calibration) made the 3-D quick start's training peak at 2.1 GB RssAnon against a plan of 451 MiB
    (glibc keeps such freed arrays)."""
    from decode_mem.io.psf_file import read_psf
    from decode_mem.simulate.spline import SplinePSF

    return SplinePSF(read_psf(path))


@lru_cache(maxsize=4)
def _file_header(path: str, mtime_ns: int, size: int, inode: int) -> dict[str, Any]:
    """``psf_header`` of a PSF file, read once per unchanged file (every config copy checks it); a PSF that changes
    across the field adds its ``field_shape`` (H, W) px."""
    from decode_mem.io.field_psf_file import field_header
    from decode_mem.io.psf_file import psf_header

    header = psf_header(path)
    field_part = field_header(path)
    if field_part is not None:
        header = {**header, "field_shape": field_part["field_shape"], "z_range": field_part["z_range"]}
    return header


def file_field(path: str) -> Any:
    """The FieldSplinePSF of a PSF file that changes across the field, read once per unchanged file (its splines
    are computed on reading: a few seconds)."""
    stat = os.stat(path)
    return _file_field(path, stat.st_mtime_ns, stat.st_size, stat.st_ino)


@lru_cache(maxsize=2)
def _file_field(path: str, mtime_ns: int, size: int, inode: int) -> Any:
    from decode_mem.io.field_psf_file import read_field_psf
    from decode_mem.simulate.field_spline import FieldSplinePSF

    return FieldSplinePSF(read_field_psf(path), file_spline(path).data)


@lru_cache(maxsize=4)
def _pupil_spline(pupil: PupilConfig, z_range: tuple[float, float], pixel_size: float) -> Any:
    """The SplinePSF of a pupil model, shared like ``_file_spline`` (its device copies too)."""
    from decode_mem.simulate.pupil import pupil_spline
    from decode_mem.simulate.spline import SplinePSF

    return SplinePSF(pupil_spline(pupil, z_range, pixel_size))


def _camera(value: Any) -> Camera:
    if isinstance(value, Camera):
        return value
    if isinstance(value, str):
        if value == "emccd":
            return Camera.emccd()
        if value == "scmos":
            return Camera.scmos()
        raise ConfigError(f"simulation.camera must be 'emccd', 'scmos' or a mapping of camera fields, got {value!r}")
    if isinstance(value, dict):
        return Camera.from_dict(value)
    raise ConfigError(f"simulation.camera must be 'emccd', 'scmos' or a mapping of camera fields, got {value!r}")


def _range(value: Any, name: str) -> tuple[float, float]:
    """A (low, high) pair of positive numbers with low <= high."""
    lo, hi = _pair(value, name)
    if not 0 < lo <= hi:
        raise ConfigError(f"simulation.{name} must be (low, high) with 0 < low <= high, got {value!r}")
    return lo, hi


def _float(value: Any, name: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"simulation.{name} must be a number, got {value!r}") from e
    if not math.isfinite(out):
        raise ConfigError(f"simulation.{name} must be finite, got {value!r}")
    return out


def _int(value: Any, name: str = "value") -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ConfigError(f"simulation.{name} must be an integer, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"simulation.{name} must be an integer, got {value!r}") from e
