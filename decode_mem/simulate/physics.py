"""Per-movie physics: the PSF width, density, background level and camera each movie (training sample) gets.

A config with ranges (``psf_sigma_range``, ``density_range``, ``pixel_size_range``, ``on_time_range``,
``camera_kinds``, ``sensor_variation_range``) describes a family of experiments; ``draw_physics`` picks one
member per movie. Without ranges every movie gets the config's fixed values and nothing is drawn from the
generator (so fixed-physics streams are unchanged). The camera ranges follow DESIGN.md §8: EMCCD with EM
gain 100–1000, baseline 100–500 ADU, 0.5–10 ADU per photon (no saturation of 16-bit counts); sCMOS with
0.2–2 e⁻/ADU, read noise 1–2.5 e⁻, QE 0.6–0.95, baseline 100 ADU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from decode_mem.io.camera import Camera
from decode_mem.simulate.config import SimulationConfig

EMCCD_GAIN = (100.0, 1000.0)
EMCCD_ADU_PER_PHOTON = (0.5, 10.0)
EMCCD_BASELINE = (100.0, 500.0)
EMCCD_READ_NOISE = (20.0, 80.0)
SCMOS_E_PER_ADU = (0.2, 2.0)
SCMOS_READ_NOISE = (1.0, 2.5)
QE = (0.6, 0.95)


@dataclass(frozen=True)
class Physics:
    """What ``n`` movies were given: ``sigma0`` (n, 2) px, ``density_px`` (n,) emitters per px² visible per
    frame, ``on_time`` (n,) mean on-time in frames, ``cameras`` (one per movie), ``maps_known`` (n,) bool
    (convert with the per-pixel maps) and ``sensor_variation`` (n,) the sCMOS per-pixel spread (0: none)."""

    sigma0: torch.Tensor
    density_px: torch.Tensor
    on_time: torch.Tensor
    cameras: tuple[Camera, ...]
    maps_known: torch.Tensor
    sensor_variation: torch.Tensor

    def start_rates(self, config: SimulationConfig) -> torch.Tensor:
        """Emitters switching on per frame over the placement area, per movie (float64)."""
        return torch.tensor([config.start_rate_for(float(d), float(t)) for d, t in
                             zip(self.density_px.tolist(), self.on_time.tolist(), strict=True)],
                            dtype=torch.float64, device=self.density_px.device)


def _uniform(lo: float, hi: float, n: int, generator: torch.Generator) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=generator, device=generator.device, dtype=torch.float64)


def _loguniform(lo: float, hi: float, n: int, generator: torch.Generator) -> torch.Tensor:
    return torch.exp(_uniform(math.log(lo), math.log(hi), n, generator))


def draw_physics(config: SimulationConfig, n: int, generator: torch.Generator) -> Physics:
    """One draw per movie of everything the config leaves open (see the module docstring)."""
    dev = generator.device
    if config.psf_sigma_range is not None:
        s = _uniform(*config.psf_sigma_range, n, generator).float()
        sigma0 = torch.stack([s, s], dim=1)
    else:
        sigma0 = torch.tensor([config.psf_sigma], dtype=torch.float32, device=dev).expand(n, 2)
    if config.density_range is not None:
        draw = _loguniform if config.density_dist == "loguniform" else _uniform
        density = draw(*config.density_range, n, generator)
    else:
        density = torch.full((n,), config.density, dtype=torch.float64, device=dev)
    pixel = (_uniform(*config.pixel_size_range, n, generator) if config.pixel_size_range is not None
             else torch.full((n,), config.camera.pixel_size, dtype=torch.float64, device=dev))
    density_px = density * (pixel / 1000.0) ** 2
    on_time = (_loguniform(*config.on_time_range, n, generator) if config.on_time_range is not None
               else torch.full((n,), config.on_time, dtype=torch.float64, device=dev))
    if config.camera_kinds:
        kinds = torch.randint(len(config.camera_kinds), (n,), generator=generator, device=dev).tolist()
        # all cameras' uniforms in one draw (one device sync); the same numbers as n calls of random_camera
        draws = torch.rand((n, 5), generator=generator, device=dev, dtype=torch.float64).tolist()
        cameras = tuple(camera_from_uniforms(config.camera_kinds[k], float(p), r)
                        for k, p, r in zip(kinds, pixel.tolist(), draws, strict=True))
    else:
        cameras = (config.camera,) * n
    if config.maps_known < 1:
        known = torch.rand(n, generator=generator, device=dev) < config.maps_known
    else:
        known = torch.ones(n, dtype=torch.bool, device=dev)
    spread = (_uniform(*config.sensor_variation_range, n, generator) if config.sensor_variation_range is not None
              else torch.full((n,), config.sensor_variation, dtype=torch.float64, device=dev))
    return Physics(sigma0.contiguous(), density_px, on_time, cameras, known, spread)


def random_camera(kind: str, pixel_size: float, generator: torch.Generator) -> Camera:
    """A camera of ``kind`` with settings drawn from the ranges of the module docstring."""
    r = torch.rand(5, generator=generator, device=generator.device, dtype=torch.float64).tolist()
    return camera_from_uniforms(kind, pixel_size, r)


def camera_from_uniforms(kind: str, pixel_size: float, r: list[float]) -> Camera:
    """The camera of ``kind`` that five uniforms in [0, 1) pick from the ranges of the module docstring."""

    def lin(lo_hi: tuple[float, float], u: float) -> float:
        return lo_hi[0] + (lo_hi[1] - lo_hi[0]) * u

    def log(lo_hi: tuple[float, float], u: float) -> float:
        return math.exp(lin((math.log(lo_hi[0]), math.log(lo_hi[1])), u))

    qe = lin(QE, r[0])
    if kind == "emccd":
        gain = log(EMCCD_GAIN, r[1])
        e_per_adu = qe * gain / log(EMCCD_ADU_PER_PHOTON, r[2])
        return Camera.emccd(baseline=round(lin(EMCCD_BASELINE, r[3])), e_per_adu=e_per_adu, em_gain=gain, qe=qe,
                            read_noise=lin(EMCCD_READ_NOISE, r[4]), pixel_size=pixel_size)
    return Camera.scmos(e_per_adu=log(SCMOS_E_PER_ADU, r[1]), qe=qe, read_noise=lin(SCMOS_READ_NOISE, r[2]),
                        pixel_size=pixel_size)
