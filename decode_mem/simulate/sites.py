"""The sites of a structure (``structures.StructureConfig``) and their blinks (DNA-PAINT-like), epoch by epoch.

Geometry: ring and grid sites around a centre uniform over the placement area, rotated at random; filaments
are worm-like chains centred there; their number is Poisson (``density`` per µm²). Sites are in px of the
undrifted sample, made with a CPU generator (the same sites on every device).

Each site alternates between dark periods (exponential, mean ``structure.off_time`` frames) and blinks
(exponential, mean ``on_time``); every blink draws its own flux and PSF width (a new imager strand binds).
A movie starts in the stationary state: a site is on at t = 0 with probability ``on / (on + off)``, and by
memorylessness its remaining on or off time is exponential with the same mean.

State: per site the start time of its next blink (drawn, not yet reached) — a fixed array — plus the blinks
still on. Epoch ``k`` (frames ``[kE, (k+1)E)``) draws, from its own generator ``(seed, k)``, every blink that
starts in it, site by site in order, and the dark time after each. So a movie is the same whatever frame
blocks it is asked for in, and the state does not grow with the movie's length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

from decode_mem.simulate.config import SimulationConfig
from decode_mem.simulate.emitters import EPOCH_FRAMES, BlinkingProcess, Emitters, sample_flux
from decode_mem.simulate.structures import StructureConfig


@dataclass(frozen=True)
class Sites:
    """N fixed binding sites: ``x``, ``y`` (px, float64, in the undrifted sample), ``z`` (nm, float32) and
    ``structure`` (int64, which structure each site belongs to)."""

    x: torch.Tensor
    y: torch.Tensor
    z: torch.Tensor
    structure: torch.Tensor

    def __len__(self) -> int:
        return self.x.numel()

    def to(self, device: torch.device | str) -> Sites:
        return Sites(*(getattr(self, f.name).to(device) for f in fields(self)))


def make_sites(config: StructureConfig, extent: tuple[tuple[float, float], tuple[float, float]], pixel_size: float,
               z_range: tuple[float, float] | None, generator: torch.Generator) -> Sites:
    """Sites of a Poisson number of structures placed over ``extent`` ((x0, x1), (y0, y1)) px.

    ``z_range`` (nm): one z per structure, uniform in it (None: z = 0). Filament sites outside ``extent`` are
    dropped (they could not be seen); ring and grid sites are kept with their structure.
    """
    if not config.enabled:
        raise ValueError("make_sites: structure kind is 'none'")
    (x0, x1), (y0, y1) = extent
    area_um2 = (x1 - x0) * (y1 - y0) * (pixel_size / 1000.0) ** 2
    mean = torch.tensor([config.density * area_um2], dtype=torch.float64)
    n = int(torch.poisson(mean, generator=generator).item())

    def uniform(lo: float, hi: float, size: int) -> torch.Tensor:
        return lo + (hi - lo) * torch.rand(size, dtype=torch.float64, generator=generator)

    cx, cy = uniform(x0, x1, n), uniform(y0, y1, n)
    z = uniform(*z_range, n) if z_range is not None else torch.zeros(n, dtype=torch.float64)
    if config.kind == "filaments":
        dx, dy = _filaments(config, n, generator)
    else:
        local = _ring(config) if config.kind == "rings" else _grid(config)  # (m, 2) nm around the centre
        angle = uniform(0.0, 2 * math.pi, n)
        cos, sin = torch.cos(angle)[:, None], torch.sin(angle)[:, None]
        dx = cos * local[:, 0] - sin * local[:, 1]
        dy = sin * local[:, 0] + cos * local[:, 1]
    m = dx.shape[1]
    structure = torch.arange(n).repeat_interleave(m)
    x = (cx[:, None] + dx / pixel_size).reshape(-1)
    y = (cy[:, None] + dy / pixel_size).reshape(-1)
    sites = Sites(x, y, z[structure].float(), structure)
    if config.kind == "filaments":
        keep = (x >= x0) & (x < x1) & (y >= y0) & (y < y1)
        sites = Sites(*(getattr(sites, f.name)[keep] for f in fields(Sites)))
    return sites


def _ring(config: StructureConfig) -> torch.Tensor:
    k = torch.arange(config.ring_sites, dtype=torch.float64)
    phi = 2 * math.pi * k / config.ring_sites
    return torch.stack([torch.cos(phi), torch.sin(phi)], 1) * (config.ring_diameter / 2)


def _grid(config: StructureConfig) -> torch.Tensor:
    rows, cols = config.grid_shape
    r, c = torch.meshgrid(torch.arange(rows, dtype=torch.float64), torch.arange(cols, dtype=torch.float64),
                          indexing="ij")
    return torch.stack([(c - (cols - 1) / 2).reshape(-1), (r - (rows - 1) / 2).reshape(-1)], 1) * config.grid_spacing


def _filaments(config: StructureConfig, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, m) offsets in nm from each filament's middle; a shorter filament has NaN sites beyond its length
    (dropped later as outside the extent)."""
    s = config.filament_spacing
    m = max(1, math.ceil(1.5 * config.filament_length / s))
    length = config.filament_length * (0.5 + torch.rand(n, dtype=torch.float64, generator=generator))
    theta0 = 2 * math.pi * torch.rand(n, 1, dtype=torch.float64, generator=generator)
    turns = math.sqrt(s / config.filament_persistence) * torch.randn(n, m, dtype=torch.float64, generator=generator)
    theta = theta0 + torch.cumsum(turns, 1) - turns[:, :1]  # the first step goes along theta0
    steps = torch.cat([torch.zeros(n, 1, dtype=torch.float64), torch.ones(n, m - 1, dtype=torch.float64) * s], 1)
    dx = torch.cumsum(steps * torch.cos(theta), 1)
    dy = torch.cumsum(steps * torch.sin(theta), 1)
    mid = (length / (2 * s)).long().clamp_max(m - 1)[:, None]  # centre the filament on its placement point
    dx, dy = dx - dx.gather(1, mid), dy - dy.gather(1, mid)
    beyond = torch.arange(m, dtype=torch.float64)[None, :] * s > length[:, None]
    return dx.masked_fill(beyond, math.nan), dy.masked_fill(beyond, math.nan)


class SiteBlinking(BlinkingProcess):
    """The blinks of ``sites`` in one movie; ``active``/``rows`` as in ``BlinkingProcess``.

    ``on_time``: the movie's mean blink length (default ``config.on_time``).
    """

    def __init__(self, config: SimulationConfig, sites: Sites, seed: int, device: torch.device | str = "cpu",
                 epoch: int = EPOCH_FRAMES, on_time: float | None = None) -> None:
        self.sites = sites.to(device)
        self.off_time = config.structure.off_time
        self._next_on = torch.zeros(0, dtype=torch.float64)
        super().__init__(config, seed, device, epoch, rate=0.0, on_time=on_time)

    @property
    def mean_on(self) -> float:
        return self.config.on_time if self.on_time is None else self.on_time

    def _initial(self, generator: torch.Generator) -> Emitters:
        n = len(self.sites)
        dev = self.device
        on, off = self.mean_on, self.off_time
        lit = torch.rand(n, generator=generator, device=dev) < on / (on + off)
        dark = torch.empty(n, dtype=torch.float64, device=dev).exponential_(1.0 / off, generator=generator)
        idx = torch.nonzero(lit).squeeze(1)
        blinks = self._blinks(idx, torch.zeros(idx.numel(), dtype=torch.float64, device=dev), generator)
        self._next_on = dark
        self._next_on[idx] = blinks.end + dark[idx]  # the dark time after the blink that is on at t = 0
        return blinks

    def _fresh(self, t_low: float, t_high: float, generator: torch.Generator) -> Emitters:
        parts = [Emitters.empty(self.device)]
        while True:  # a site may blink more than once per epoch when off_time is short
            idx = torch.nonzero(self._next_on < t_high).squeeze(1)
            if idx.numel() == 0:
                break
            blinks = self._blinks(idx, self._next_on[idx], generator)
            dark = torch.empty(idx.numel(), dtype=torch.float64, device=self.device)
            self._next_on[idx] = blinks.end + dark.exponential_(1.0 / self.off_time, generator=generator)
            parts.append(blinks)
        return Emitters.cat(parts)

    def _blinks(self, idx: torch.Tensor, start: torch.Tensor, generator: torch.Generator) -> Emitters:
        """Blinks of sites ``idx`` starting at ``start``: exponential length, fresh flux and width."""
        n = idx.numel()
        dev = self.device
        length = torch.empty(n, dtype=torch.float64, device=dev).exponential_(1.0 / self.mean_on, generator=generator)
        flux = sample_flux(self.config, n, generator)
        if self.config.psf_sigma_jitter > 0:
            width = torch.exp(self.config.psf_sigma_jitter * torch.randn(n, generator=generator, device=dev))
        else:
            width = torch.ones(n, device=dev)
        s = self.sites
        return Emitters(torch.zeros(n, dtype=torch.long, device=dev), start, start + length, s.x[idx].float(),
                        s.y[idx].float(), s.z[idx], flux, width)
