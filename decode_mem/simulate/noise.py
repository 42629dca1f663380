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

import torch
import torch.nn.functional as F

from decode_mem.io.camera import Camera, PixelMaps
from decode_mem.simulate.config import SimulationConfig

ADU_MAX = 65535.0


def sensor_maps(camera: Camera, shape: tuple[int, int], variation: float,
                generator: torch.Generator) -> PixelMaps:
    """Random per-pixel sCMOS maps (torch, on the generator's device) around the camera's scalars,
    with relative spread ``variation`` (gain, read noise lognormal-ish, offset)."""
    dev = generator.device

    def randn() -> torch.Tensor:
        return torch.randn(shape, generator=generator, device=dev)

    e_per_adu = camera.e_per_adu * (1 + variation * randn()).clamp_min(0.05)
    read_noise = camera.read_noise * torch.exp(variation * randn())
    baseline = camera.baseline * (1 + variation * randn()).clamp_min(0)
    return PixelMaps(baseline, e_per_adu, read_noise)


def emccd_adu(photons: torch.Tensor, camera: Camera, generator: torch.Generator) -> torch.Tensor:
    """Noisy EMCCD counts (same shape, float32 holding integers in [0, 65535]) of expected photons."""
    electrons = torch.poisson(photons.float().clamp_min(0).mul_(camera.qe), generator=generator)
    signal = torch._standard_gamma(electrons, generator=generator).mul_(camera.em_gain)
    signal.masked_fill_(electrons == 0, 0.0)  # Gamma(shape 0) is 0 electrons (torch returns a tiny number)
    if camera.read_noise > 0:
        signal.add_(torch.randn(signal.shape, generator=generator, device=signal.device).mul_(camera.read_noise))
    return signal.div_(camera.e_per_adu).add_(camera.baseline).round_().clamp_(0, ADU_MAX)


def scmos_adu(photons: torch.Tensor, camera: Camera, generator: torch.Generator,
              sensor: PixelMaps | None = None) -> torch.Tensor:
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
               sensor: PixelMaps | None = None) -> torch.Tensor:
    """Noisy counts of ``camera.kind`` ('emccd' | 'scmos'); ``sensor`` is used by sCMOS only."""
    if camera.kind == "emccd":
        return emccd_adu(photons, camera, generator)
    return scmos_adu(photons, camera, generator, sensor)


def background(config: SimulationConfig, n: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` background fields (n, H, W) float32 in photons/px (``config.bg_mode``, see SimulationConfig).

    A level per field from ``config.bg`` (``bg_dist``); 'smooth' multiplies it by ``1 + amplitude·f``, where
    ``f`` is a bicubic upsampling of white noise on a grid of spacing ~``bg_smooth_scale`` px, scaled to
    max |f| = 1 (so the field stays >= 0 for amplitude <= 1); 'cell' by ``cell_field``; 'mixed' picks one
    of 'uniform', 'smooth' (a quarter each) and 'cell' (half) per field.
    """
    dev = generator.device
    h, w = config.frame_size
    lo, hi = config.bg
    u = torch.rand(n, generator=generator, device=dev)
    level = lo + (hi - lo) * u if config.bg_dist == "uniform" else lo * (hi / lo) ** u
    if config.bg_mode == "uniform":
        return level[:, None, None].expand(n, h, w).contiguous()
    if config.bg_mode == "smooth":
        return level[:, None, None] * smooth_field(config, n, generator)
    if config.bg_mode == "cell":
        return level[:, None, None] * torch.stack([cell_field(config, generator) for _ in range(n)])
    modes = torch.rand(n, generator=generator, device=dev).tolist()
    fields = []
    for m in modes:
        if m < 0.25:
            fields.append(torch.ones((h, w), device=dev))
        elif m < 0.5:
            fields.append(smooth_field(config, 1, generator)[0])
        else:
            fields.append(cell_field(config, generator))
    return level[:, None, None] * torch.stack(fields)


def _noise_field(n: int, shape: tuple[int, int], scale: float, generator: torch.Generator) -> torch.Tensor:
    """(n, H, W) smooth random fields in [-1, 1]: white noise on a grid of spacing ~``scale`` px, bicubic."""
    h, w = shape
    gh = max(2, math.ceil(h / scale) + 1)
    gw = max(2, math.ceil(w / scale) + 1)
    coarse = torch.randn((n, 1, gh, gw), generator=generator, device=generator.device)
    f = F.interpolate(coarse, size=(h, w), mode="bicubic", align_corners=True)[:, 0]
    return f / f.abs().amax(dim=(1, 2), keepdim=True).clamp_min(1e-6)


def smooth_field(config: SimulationConfig, n: int, generator: torch.Generator) -> torch.Tensor:
    """(n, H, W) ``1 + bg_smooth_amplitude·f`` (>= 0)."""
    f = _noise_field(n, config.frame_size, config.bg_smooth_scale, generator)
    return (1 + config.bg_smooth_amplitude * f).clamp_min(0)


def cell_field(config: SimulationConfig, generator: torch.Generator) -> torch.Tensor:
    """(H, W) cell-like relative background with median 1: a gradient, a smooth field and 1–3 bright blobs.

    The structure size is ``bg_smooth_scale`` times a factor log-uniform in [0.5, 4]; blobs (nuclei,
    out-of-focus light) add ``bg_smooth_amplitude`` × 1–10 (log-uniform) times the base level at their centre
    (0.5–5× for the default 0.5), so the field varies several-fold across a cell and its surroundings.
    """
    dev = generator.device
    h, w = config.frame_size
    r = torch.rand(8, generator=generator, device=dev).tolist()
    scale = config.bg_smooth_scale * math.exp(math.log(0.5) + r[0] * math.log(8.0))
    rows = torch.arange(h, device=dev, dtype=torch.float32)[:, None]
    cols = torch.arange(w, device=dev, dtype=torch.float32)[None, :]
    angle = 2 * math.pi * r[1]
    ramp = ((cols - w / 2) * math.cos(angle) + (rows - h / 2) * math.sin(angle)) / max(h, w, 1)
    field = 1 + r[2] * ramp + 0.5 * r[3] * _noise_field(1, (h, w), scale, generator)[0]
    field = field.clamp_min(0.2)
    for _ in range(1 + int(3 * r[4])):
        b = torch.rand(4, generator=generator, device=dev).tolist()
        cy, cx = (b[0] * 1.5 - 0.25) * h, (b[1] * 1.5 - 0.25) * w
        radius = scale * (0.5 + b[2])
        amplitude = config.bg_smooth_amplitude * 10.0 ** b[3]
        field = field + amplitude * torch.exp(-((rows - cy) ** 2 + (cols - cx) ** 2) / (2 * radius**2))
    return field / field.median()
