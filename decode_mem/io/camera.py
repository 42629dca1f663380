"""Camera model: converts between camera counts (ADU) and photons, with optional per-pixel sCMOS maps."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.config import camera_field_problem as field_problem
from decode_mem.config import check_keys
from decode_mem.errors import ConfigError, exception_line

MAP_FIELDS = ("offset_map", "e_per_adu_map", "variance_map")
NUMBERS = ("e_per_adu", "em_gain", "qe", "read_noise", "pixel_size", "baseline")
PRESETS = ("emccd", "scmos")  # what ``--camera`` takes besides a camera YAML, in every job
CAMERA_FLAGS = ("baseline", "e_per_adu", "em_gain", "qe", "read_noise", "pixel_size")  # ``--<field>`` in every job


@dataclass(frozen=True)
class Camera:
    """Linear camera model of an EMCCD or sCMOS camera.

    Expected signal: ``adu = baseline + photons * qe * em_gain / e_per_adu``. ``em_gain=1`` is a camera
    without EM amplification (sCMOS). ``pixel_size`` is the pixel's edge in the sample plane, in nm.
    The defaults are the SMLM-challenge-like EMCCD used throughout decode_mem.

    sCMOS calibration maps (paths to ``.npy`` or ``.tif`` images of the frame size, as in the camera YAML):
    ``offset_map`` per-pixel baseline [ADU] (replaces ``baseline``), ``e_per_adu_map`` per-pixel
    electrons per ADU (replaces ``e_per_adu``), ``variance_map`` per-pixel read-noise variance [ADU²]
    (replaces ``read_noise``). Relative paths are taken relative to the YAML file that names them.
    """

    baseline: float = 100.0
    e_per_adu: float = 45.0
    em_gain: float = 300.0
    qe: float = 0.9
    read_noise: float = 74.4  # electrons rms
    pixel_size: float = 100.0  # nm
    kind: str = "emccd"  # "emccd" | "scmos"
    offset_map: str | None = None
    e_per_adu_map: str | None = None
    variance_map: str | None = None

    def __post_init__(self) -> None:
        for name in NUMBERS:
            problem = field_problem(name, getattr(self, name))
            if problem:
                raise ConfigError(f"camera.{name} {problem}")
        if self.kind not in ("emccd", "scmos"):
            raise ConfigError(f"camera.kind must be 'emccd' or 'scmos', got {self.kind!r}")
        for name in MAP_FIELDS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise ConfigError(f"camera.{name} must be a path to a .npy or .tif file, got {value!r}")
            if value is not None:
                object.__setattr__(self, name, str(value))

    @classmethod
    def emccd(cls, **overrides: Any) -> Camera:
        """The challenge-like EMCCD: baseline 100, 45 e-/ADU, EM gain 300, read noise 74.4 e-, QE 0.9."""
        return cls(**overrides)

    @classmethod
    def scmos(cls, **overrides: Any) -> Camera:
        """A typical sCMOS camera: no EM gain, ~1.6 e- read noise, 0.5 e-/ADU, QE 0.8."""
        params = dict(baseline=100.0, e_per_adu=0.5, em_gain=1.0, qe=0.8, read_noise=1.6, kind="scmos")
        params.update(overrides)
        return cls(**params)

    @classmethod
    def from_dict(cls, params: dict[str, Any], *, base_dir: str | os.PathLike | None = None,
                  source: str = "camera") -> Camera:
        """Build from a mapping (YAML); unknown keys are an error naming the key (and ``source``: the file).

        Map paths that are relative are resolved against ``base_dir`` (the YAML file's folder) when given.
        """
        check_keys(cls, params, source)
        params = dict(params)
        for name in MAP_FIELDS:
            if params.get(name) is not None and not isinstance(params[name], (str, os.PathLike)):
                raise ConfigError(f"camera.{name} must be a path to a .npy or .tif file, got {params[name]!r}")
        if base_dir is not None:
            for name in MAP_FIELDS:
                if params.get(name) is not None and not Path(params[name]).is_absolute():
                    params[name] = str(Path(base_dir) / params[name])
        return cls(**params)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def has_maps(self) -> bool:
        return any(getattr(self, name) is not None for name in MAP_FIELDS)

    def without_maps(self) -> Camera:
        return replace(self, **dict.fromkeys(MAP_FIELDS))

    @property
    def adu_per_photon(self) -> float:
        """Mean ADU produced by one photon hitting the sensor."""
        return self.qe * self.em_gain / self.e_per_adu

    @property
    def read_variance_photons(self) -> float:
        """Read-noise variance in photons² (read noise is added after the EM register)."""
        return float((self.read_noise / (self.qe * self.em_gain)) ** 2)

    def to_photons(self, adu: Any, maps: PixelMaps | None = None) -> Any:
        """ADU -> photons (float32 for numpy input; torch tensors stay torch).

        ``maps``: per-pixel calibration (``load_maps``), already cropped to the region of ``adu``'s last two axes.
        """
        if maps is None:
            return (_as_float(adu) - self.baseline) / self.adu_per_photon
        return (_as_float(adu) - maps.baseline) * (maps.e_per_adu / (self.qe * self.em_gain))

    def to_adu(self, photons: Any) -> Any:
        """Photons -> expected ADU, without noise."""
        return _as_float(photons) * self.adu_per_photon + self.baseline

    def read_variance(self, maps: PixelMaps | None = None) -> Any:
        """Read-noise variance in photons²: a float, or a per-pixel map with ``maps``."""
        if maps is None:
            return self.read_variance_photons
        return (maps.read_noise / (self.qe * self.em_gain)) ** 2

    def load_maps(self, shape: tuple[int, int]) -> PixelMaps | None:
        """The per-pixel maps for frames of ``shape`` (H, W), or None without maps; bad maps raise ConfigError."""
        if not self.has_maps:
            return None
        h, w = (int(v) for v in shape)
        baseline = _read_map(self.offset_map, (h, w)) if self.offset_map else np.full((h, w), self.baseline)
        if self.e_per_adu_map:
            gain = _read_map(self.e_per_adu_map, (h, w))
            if not (gain > 0).all():
                raise ConfigError(f"{self.e_per_adu_map}: e_per_adu map must be > 0 everywhere")
        else:
            gain = np.full((h, w), self.e_per_adu)
        if self.variance_map:
            var = _read_map(self.variance_map, (h, w))
            if not (var >= 0).all():
                raise ConfigError(f"{self.variance_map}: variance map must be >= 0 ADU² everywhere")
            read_noise = np.sqrt(var) * gain  # ADU rms -> electrons rms
        else:
            read_noise = np.full((h, w), self.read_noise)
        return PixelMaps(baseline.astype(np.float32), gain.astype(np.float32), read_noise.astype(np.float32))


@dataclass(frozen=True)
class PixelMaps:
    """Per-pixel sCMOS calibration (H, W) float32: baseline [ADU], e⁻/ADU, read noise [e⁻ rms].

    numpy arrays or torch tensors (``to_torch``); ``crop`` cuts a region so that a tile uses its own pixels.
    """

    baseline: Any
    e_per_adu: Any
    read_noise: Any

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.baseline.shape)

    def crop(self, rows: slice, cols: slice) -> PixelMaps:
        return PixelMaps(self.baseline[rows, cols], self.e_per_adu[rows, cols], self.read_noise[rows, cols])

    def padded(self, shape: tuple[int, int]) -> PixelMaps:
        """Grown at the bottom/right to ``shape`` with neutral values (the padded pixels are never used)."""
        h, w = self.shape
        pad = ((0, shape[0] - h), (0, shape[1] - w))
        return PixelMaps(np.pad(self.baseline, pad), np.pad(self.e_per_adu, pad, constant_values=1.0),
                         np.pad(self.read_noise, pad))

    def to_torch(self, device: Any) -> PixelMaps:
        import torch

        return PixelMaps(*(torch.as_tensor(np.asarray(a), dtype=torch.float32, device=device)
                           for a in (self.baseline, self.e_per_adu, self.read_noise)))


def _read_map(path: str, shape: tuple[int, int]) -> np.ndarray:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such camera map file")
    try:
        if p.suffix.lower() == ".npy":
            array = np.load(p, allow_pickle=False)
        elif p.suffix.lower() in (".tif", ".tiff"):
            import tifffile

            array = tifffile.imread(p)
        else:
            raise ConfigError(f"{p}: camera maps must be .npy or .tif files")
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"{p}: cannot read camera map ({exception_line(e)})") from e
    array = np.asarray(array, dtype=np.float64)
    if array.ndim == 3 and array.shape[0] == 1:
        array = array[0]
    if array.shape != tuple(shape):
        raise ConfigError(f"{p}: camera map is {'x'.join(map(str, array.shape))} px, the frames are "
                          f"{shape[0]}x{shape[1]} px")
    if not np.isfinite(array).all():
        raise ConfigError(f"{p}: camera map holds NaN or infinite values")
    return array


def preset(kind: str) -> Camera:
    """The preset camera of a kind: ``Camera.emccd()`` (read noise 74.4 e-) or ``Camera.scmos()`` (1.6 e-)."""
    if kind not in PRESETS:
        raise ConfigError(f"camera kind must be one of {', '.join(PRESETS)}, got {kind!r}")
    return Camera.emccd() if kind == "emccd" else Camera.scmos()


def camera_fields(value: str | os.PathLike | None) -> dict[str, Any]:
    """The fields a ``--camera`` value sets, the same in every job: a preset name (``emccd``, ``scmos``: its
    ``kind``, the preset fills the rest) or a camera YAML (its keys, validated; map paths made absolute)."""
    from decode_mem.config import load_yaml

    if value is None:
        return {}
    if str(value) in PRESETS and not Path(value).is_file():  # a folder named after a camera is no camera file
        return {"kind": str(value)}
    if not Path(value).is_file():
        raise ConfigError(f"--camera {value}: neither a preset ({' or '.join(PRESETS)}) nor a camera YAML file")
    fields = load_yaml(value, section="camera")
    # validates every key; an unknown one (and every other problem) is named with the YAML file
    try:
        resolved = Camera.from_dict({**fields}, base_dir=Path(value).parent, source=f"{value}: camera").to_dict()
    except ConfigError as e:
        raise ConfigError(str(e) if str(e).startswith(str(value)) else f"{value}: {e}") from None
    for name in MAP_FIELDS:  # the maps are read later, for the frames' size: that they are there is checked now
        if resolved[name] is not None and not Path(resolved[name]).is_file():
            raise ConfigError(f"{value}: camera.{name} {resolved[name]}: no such camera map file")
    return {k: resolved[k] for k in fields}


def with_fields(camera: Camera, fields: dict[str, Any]) -> Camera:
    """``camera`` with ``fields`` (``camera_fields`` or camera flags) set; the fields not given come from
    ``camera``, or from the preset of a ``kind`` that the fields change. ``em_gain`` 1 on an EMCCD without a
    ``kind``: a read-out without EM register, so no excess noise (kind ``scmos``) and, unless ``read_noise`` is
    given, the sCMOS preset's read noise (1.6 e-) rather than the 74.4 e- of an EMCCD's EM register."""
    fields = {k: v for k, v in fields.items() if v is not None}
    check_keys(Camera, fields, "camera")
    if fields.get("kind", camera.kind) != camera.kind:
        camera = preset(fields["kind"])
    params = {**camera.to_dict(), **fields}
    if params["em_gain"] == 1 and params["kind"] == "emccd" and "kind" not in fields:
        params["kind"] = "scmos"
        if "read_noise" not in fields:
            params["read_noise"] = Camera.scmos().read_noise
    return Camera(**params)


def _as_float(a: Any) -> Any:
    if hasattr(a, "is_floating_point"):  # torch.Tensor, without importing torch here
        return a if a.is_floating_point() else a.float()
    return np.asarray(a, dtype=np.float32)
