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
    max |f| = 1 (so the field stays >= 0 for amplitude <= 1); 'cell' by ``cell_fields``; 'mixed' picks one
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
        return level[:, None, None] * cell_fields(config, n, generator)
    # 'mixed': the smooth fields drawn together, then the cell-like ones (field by field's numbers when n = 1)
    modes = torch.rand(n, generator=generator, device=dev).tolist()
    fields = torch.ones((n, h, w), device=dev)
    smooth = [i for i, m in enumerate(modes) if 0.25 <= m < 0.5]
    cell = [i for i, m in enumerate(modes) if m >= 0.5]
    if smooth:
        fields[torch.tensor(smooth, device=dev)] = smooth_field(config, len(smooth), generator)
    if cell:
        fields[torch.tensor(cell, device=dev)] = cell_fields(config, len(cell), generator)
    return level[:, None, None] * fields


def _grid(shape: tuple[int, int], scale: float) -> tuple[int, int]:
    """The coarse grid of ``_noise_field``: spacing ~``scale`` px over ``shape``."""
    h, w = shape
    return max(2, math.ceil(h / scale) + 1), max(2, math.ceil(w / scale) + 1)


def _noise_field(n: int, shape: tuple[int, int], scale: float, generator: torch.Generator) -> torch.Tensor:
    """(n, H, W) smooth random fields in [-1, 1]: white noise on a grid of spacing ~``scale`` px, bicubic."""
    h, w = shape
    gh, gw = _grid(shape, scale)
    coarse = torch.randn((n, 1, gh, gw), generator=generator, device=generator.device)
    f = F.interpolate(coarse, size=(h, w), mode="bicubic", align_corners=True)[:, 0]
    return f / f.abs().amax(dim=(1, 2), keepdim=True).clamp_min(1e-6)


def smooth_field(config: SimulationConfig, n: int, generator: torch.Generator) -> torch.Tensor:
    """(n, H, W) ``1 + bg_smooth_amplitude·f`` (>= 0)."""
    f = _noise_field(n, config.frame_size, config.bg_smooth_scale, generator)
    return (1 + config.bg_smooth_amplitude * f).clamp_min(0)


def cell_field(config: SimulationConfig, generator: torch.Generator) -> torch.Tensor:
    """(H, W) one cell-like relative background (``cell_fields``)."""
    return cell_fields(config, 1, generator)[0]


def cell_fields(config: SimulationConfig, n: int, generator: torch.Generator) -> torch.Tensor:
    """(n, H, W) cell-like relative backgrounds with median 1: a gradient, a smooth field and 1–3 bright blobs.

    The structure size is ``bg_smooth_scale`` times a factor log-uniform in [0.5, 4]; blobs (nuclei,
    out-of-focus light) add ``bg_smooth_amplitude`` × 1–10 (log-uniform) times the base level at their centre
    (0.5–5× for the default 0.5), so the field varies several-fold across a cell and its surroundings.
    All n fields at once: one host sync (each field's structure size sets its coarse noise grid; fields of
    one grid are drawn together). Per-field constants are computed in float64 and applied in float32.
    """
    dev = generator.device
    h, w = config.frame_size
    r = torch.rand((n, 8), generator=generator, device=dev).tolist()  # one sync: the grids depend on it
    scale = [config.bg_smooth_scale * math.exp(math.log(0.5) + ri[0] * math.log(8.0)) for ri in r]
    noise = torch.empty((n, h, w), device=dev)
    grids: dict[tuple[int, int], list[int]] = {}
    for i, s in enumerate(scale):
        grids.setdefault(_grid((h, w), s), []).append(i)
    for index in grids.values():
        noise[torch.tensor(index, device=dev)] = _noise_field(len(index), (h, w), scale[index[0]], generator)
    rows = torch.arange(h, device=dev, dtype=torch.float32)[:, None]
    cols = torch.arange(w, device=dev, dtype=torch.float32)[None, :]

    def per_field(values: list[float]) -> torch.Tensor:  # (n, 1, 1) float32 from the host's float64 numbers
        return torch.tensor(values, dtype=torch.float32, device=dev)[:, None, None]

    angle = [2 * math.pi * ri[1] for ri in r]
    ramp = ((cols - w / 2) * per_field([math.cos(a) for a in angle])
            + (rows - h / 2) * per_field([math.sin(a) for a in angle])) / max(h, w, 1)
    field = 1 + per_field([ri[2] for ri in r]) * ramp + per_field([0.5 * ri[3] for ri in r]) * noise
    field = field.clamp_min(0.2)
    blobs = torch.rand((n, 3, 4), generator=generator, device=dev).tolist()
    for k in range(3):  # field i has 1 + int(3·r[i][4]) blobs; the others add exactly 0
        bk = [bi[k] for bi in blobs]
        radius = [s * (0.5 + b[2]) for s, b in zip(scale, bk, strict=True)]
        amplitude = [config.bg_smooth_amplitude * 10.0 ** b[3] if k < 1 + int(3 * ri[4]) else 0.0
                     for b, ri in zip(bk, r, strict=True)]
        cy = per_field([(b[0] * 1.5 - 0.25) * h for b in bk])
        cx = per_field([(b[1] * 1.5 - 0.25) * w for b in bk])
        field = field + per_field(amplitude) * torch.exp(-((rows - cy) ** 2 + (cols - cx) ** 2)
                                                         / per_field([2 * q**2 for q in radius]))
    return field / field.flatten(1).median(dim=1).values[:, None, None]
