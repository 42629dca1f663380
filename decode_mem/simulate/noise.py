"""Background and camera noise: expected photons on the sensor -> integer camera counts (ADU).

EMCCD (DECODE's ``Photon2Camera`` order, re-derived): photoelectrons ``n ~ Poisson(qe·photons)``; EM
register ``Gamma(shape=n, scale=em_gain)`` (0 for n = 0); read noise ``Normal(0, read_noise)`` e⁻;
``/ e_per_adu``; ``+ baseline``; round to the nearest count and clip to [0, 65535] (uint16).
Mean: ``baseline + photons·qe·em_gain/e_per_adu`` (``Camera.to_adu``); variance
``(2·em_gain²·qe·photons + read_noise²)/e_per_adu² + 1/12`` — the EM excess-noise factor 2 (F = √2).
Spurious charge is not modelled.

sCMOS: ``n ~ Poisson(qe·photons)``; ``(em_gain·n + Normal(0, read_noise_px))/e_per_adu_px + baseline_px``;
round and clip. ``em_gain`` is 1 for ``Camera.scmos()``; the per-pixel maps default to the camera's scalars.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from decode_mem.io.camera import Camera
from decode_mem.simulate.config import SimulationConfig

ADU_MAX = 65535.0


@dataclass(frozen=True)
class SensorMaps:
    """Per-pixel sCMOS calibration maps (H, W) float32: e⁻/ADU, read noise (e⁻ rms), baseline (ADU)."""

    e_per_adu: torch.Tensor
    read_noise: torch.Tensor
    baseline: torch.Tensor


def sensor_maps(camera: Camera, shape: tuple[int, int], variation: float,
                generator: torch.Generator) -> SensorMaps:
    """Random per-pixel maps around the camera's scalars, with relative spread ``variation``."""
    dev = generator.device
    def randn() -> torch.Tensor:
        return torch.randn(shape, generator=generator, device=dev)

    e_per_adu = camera.e_per_adu * (1 + variation * randn()).clamp_min(0.05)
    read_noise = camera.read_noise * torch.exp(variation * randn())
    baseline = camera.baseline * (1 + variation * randn()).clamp_min(0)
    return SensorMaps(e_per_adu, read_noise, baseline)


def emccd_adu(photons: torch.Tensor, camera: Camera, generator: torch.Generator) -> torch.Tensor:
    """Noisy EMCCD counts (same shape, float32 holding integers in [0, 65535]) of expected photons."""
    electrons = torch.poisson(photons.float().clamp_min(0).mul_(camera.qe), generator=generator)
    signal = torch._standard_gamma(electrons, generator=generator).mul_(camera.em_gain)
    signal.masked_fill_(electrons == 0, 0.0)  # Gamma(shape 0) is 0 electrons (torch returns a tiny number)
    if camera.read_noise > 0:
        signal.add_(torch.randn(signal.shape, generator=generator, device=signal.device).mul_(camera.read_noise))
    return signal.div_(camera.e_per_adu).add_(camera.baseline).round_().clamp_(0, ADU_MAX)


def scmos_adu(photons: torch.Tensor, camera: Camera, generator: torch.Generator,
              sensor: SensorMaps | None = None) -> torch.Tensor:
    """Noisy sCMOS counts (float32 holding integers in [0, 65535]); ``sensor`` maps broadcast over (..., H, W)."""
    electrons = torch.poisson(photons.float().clamp_min(0) * camera.qe, generator=generator)
    if camera.em_gain != 1:
        electrons = electrons * camera.em_gain
    scalars = (camera.read_noise, camera.e_per_adu, camera.baseline)
    read_noise, e_per_adu, baseline = scalars if sensor is None else (sensor.read_noise, sensor.e_per_adu,
                                                                     sensor.baseline)
    noise = torch.randn(electrons.shape, generator=generator, device=electrons.device)
    adu = (electrons + noise * read_noise) / e_per_adu + baseline
    return adu.round_().clamp_(0, ADU_MAX)


def camera_adu(photons: torch.Tensor, camera: Camera, generator: torch.Generator,
               sensor: SensorMaps | None = None) -> torch.Tensor:
    """Noisy counts of ``camera.kind`` ('emccd' | 'scmos'); ``sensor`` is used by sCMOS only."""
    if camera.kind == "emccd":
        return emccd_adu(photons, camera, generator)
    return scmos_adu(photons, camera, generator, sensor)


def background(config: SimulationConfig, n: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` background fields (n, H, W) float32 in photons/px.

    A level uniform in ``config.bg`` per field; with ``bg_mode='smooth'`` multiplied by
    ``1 + amplitude·f``, where ``f`` is a bicubic upsampling of white noise on a grid of spacing
    ~``bg_smooth_scale`` px, scaled to max |f| = 1 (so the field stays >= 0 for amplitude <= 1).
    """
    dev = generator.device
    h, w = config.frame_size
    lo, hi = config.bg
    level = lo + (hi - lo) * torch.rand(n, generator=generator, device=dev)
    if config.bg_mode == "uniform":
        return level[:, None, None].expand(n, h, w).contiguous()
    gh = max(2, math.ceil(h / config.bg_smooth_scale) + 1)
    gw = max(2, math.ceil(w / config.bg_smooth_scale) + 1)
    coarse = torch.randn((n, 1, gh, gw), generator=generator, device=dev)
    f = F.interpolate(coarse, size=(h, w), mode="bicubic", align_corners=True)[:, 0]
    f = f / f.abs().amax(dim=(1, 2), keepdim=True).clamp_min(1e-6)
    return (level[:, None, None] * (1 + config.bg_smooth_amplitude * f)).clamp_min(0)
