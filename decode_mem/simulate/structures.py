"""Fixed binding sites arranged as structures: filaments, rings of 8 (nuclear pores), origami grids.

A structure is a set of sites in the sample; the sites blink again and again (``decode_mem.simulate.sites``).
Geometry (lengths in nm, converted to px with the movie's pixel size):

- ``rings``: ``ring_sites`` sites evenly on a circle of ``ring_diameter`` (nuclear pore: 8 on ~107 nm),
  random rotation;
- ``grids``: ``grid_shape`` (rows, columns) sites ``grid_spacing`` apart (DNA origami), random rotation;
- ``filaments``: worm-like chains of length ``filament_length`` × U(0.5, 1.5) with a site every
  ``filament_spacing``; the direction diffuses with variance ``spacing / filament_persistence`` rad² per step,
  so it turns by about one radian over ``filament_persistence``.

Structure centres (a filament's middle) are uniform over the placement area, their number Poisson with mean
``density`` per µm². In 3D each structure lies in a plane at one z, uniform in the z range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import torch

from decode_mem.config import check_keys
from decode_mem.errors import ConfigError

STRUCTURES = ("none", "filaments", "rings", "grids")
DEFAULT_DENSITY = {"none": 0.0, "rings": 0.5, "grids": 0.5, "filaments": 0.1}  # structures per µm²


@dataclass(frozen=True)
class StructureConfig:
    """What the blinking sites are arranged in (see the module docstring); ``kind='none'``: no structure,
    emitters are placed uniformly and switch on once (``decode_mem.simulate.emitters``).

    ``density``: structures per µm² (None: 0.5 rings or grids, 0.1 filaments); ``off_time``: mean dark time
    of a site between two blinks, in frames (exponential; the blink itself lasts ``on_time`` on average).
    """

    kind: str = "none"
    density: float | None = None
    off_time: float = 200.0
    ring_diameter: float = 107.0
    ring_sites: int = 8
    grid_shape: tuple[int, int] = (3, 4)
    grid_spacing: float = 20.0
    filament_length: float = 5000.0
    filament_spacing: float = 5.0
    filament_persistence: float = 2000.0

    def __post_init__(self) -> None:
        if self.kind not in STRUCTURES:
            raise ConfigError(f"simulation.structure.kind must be one of {STRUCTURES}, got {self.kind!r}")
        if self.density is None:
            object.__setattr__(self, "density", DEFAULT_DENSITY[self.kind])
        for name in ("density", "off_time", "ring_diameter", "grid_spacing", "filament_length", "filament_spacing",
                     "filament_persistence"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"simulation.structure.{name} must be a number, got {value!r}")
            if value < 0 or (value == 0 and name != "density"):
                raise ConfigError(f"simulation.structure.{name} must be > 0, got {value!r}")
            object.__setattr__(self, name, float(value))
        shape = self.grid_shape
        if (not isinstance(shape, (list, tuple)) or len(shape) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in shape)):
            raise ConfigError(f"simulation.structure.grid_shape must be two integers >= 1 (rows, columns), "
                              f"got {shape!r}")
        object.__setattr__(self, "grid_shape", tuple(shape))
        if isinstance(self.ring_sites, bool) or not isinstance(self.ring_sites, int) or self.ring_sites < 1:
            raise ConfigError(f"simulation.structure.ring_sites must be an integer >= 1, got {self.ring_sites!r}")

    @classmethod
    def parse(cls, value: Any) -> StructureConfig:
        """A StructureConfig, a mapping of its fields, or just the kind (``"rings"``)."""
        if isinstance(value, StructureConfig):
            return value
        if isinstance(value, str) or value is None:
            return cls(kind=value or "none")
        if isinstance(value, dict):
            params = dict(value)
            check_keys(cls, params, "simulation.structure")
            return cls(**params)
        raise ConfigError(f"simulation.structure must be one of {STRUCTURES} or a mapping, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}

    @property
    def enabled(self) -> bool:
        return self.kind != "none"


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
