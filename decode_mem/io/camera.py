"""Camera model: converts between camera counts (ADU) and photons."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from decode_mem.config import check_keys
from decode_mem.errors import ConfigError


@dataclass(frozen=True)
class Camera:
    """Linear camera model of an EMCCD or sCMOS camera.

    Expected signal: ``adu = baseline + photons * qe * em_gain / e_per_adu``. ``em_gain=1`` is a camera
    without EM amplification (sCMOS). ``pixel_size`` is the pixel's edge in the sample plane, in nm.
    The defaults are the SMLM-challenge-like EMCCD used throughout decode_mem.
    """

    baseline: float = 100.0
    e_per_adu: float = 45.0
    em_gain: float = 300.0
    qe: float = 0.9
    read_noise: float = 74.4  # electrons rms
    pixel_size: float = 100.0  # nm
    kind: str = "emccd"  # "emccd" | "scmos"

    def __post_init__(self) -> None:
        for name in ("e_per_adu", "em_gain", "qe", "pixel_size"):
            value = getattr(self, name)
            if not np.isfinite(value) or value <= 0:
                raise ConfigError(f"camera.{name} must be a positive number, got {value!r}")
        if self.qe > 1:
            raise ConfigError(f"camera.qe is a quantum efficiency in (0, 1], got {self.qe!r}")
        if not np.isfinite(self.read_noise) or self.read_noise < 0:
            raise ConfigError(f"camera.read_noise must be >= 0 electrons, got {self.read_noise!r}")
        if self.kind not in ("emccd", "scmos"):
            raise ConfigError(f"camera.kind must be 'emccd' or 'scmos', got {self.kind!r}")

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
    def from_dict(cls, params: dict[str, Any]) -> Camera:
        """Build from a mapping (YAML); unknown keys are an error naming the key."""
        check_keys(cls, params, "camera")
        return cls(**params)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def adu_per_photon(self) -> float:
        """Mean ADU produced by one photon hitting the sensor."""
        return self.qe * self.em_gain / self.e_per_adu

    def to_photons(self, adu: Any) -> Any:
        """ADU -> photons (float32 for numpy input; torch tensors stay torch)."""
        return (_as_float(adu) - self.baseline) / self.adu_per_photon

    def to_adu(self, photons: Any) -> Any:
        """Photons -> expected ADU, without noise."""
        return _as_float(photons) * self.adu_per_photon + self.baseline


def _as_float(a: Any) -> Any:
    if hasattr(a, "is_floating_point"):  # torch.Tensor, without importing torch here
        return a if a.is_floating_point() else a.float()
    return np.asarray(a, dtype=np.float32)
