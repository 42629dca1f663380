"""StructureConfig: fixed binding sites arranged as filaments, rings of 8 (nuclear pores) or origami grids.

A structure is a set of sites in the sample; the sites blink again and again. The sites are made and blink in
``decode_mem.simulate.sites`` (this module holds only the validated settings, so it imports no torch).
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

from dataclasses import dataclass, fields
from typing import Any

from decode_mem.config import check_choice, check_keys, check_number
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
        check_choice("simulation.structure.kind", self.kind, STRUCTURES)
        if self.density is None:
            object.__setattr__(self, "density", DEFAULT_DENSITY[self.kind])
        for name in ("density", "off_time", "ring_diameter", "grid_spacing", "filament_length", "filament_spacing",
                     "filament_persistence"):
            value = getattr(self, name)
            check_number(f"simulation.structure.{name}", value)
            if value < 0 or (value == 0 and name != "density"):
                raise ConfigError(f"simulation.structure.{name} must be > 0, got {value!r}")
            object.__setattr__(self, name, float(value))
        shape = self.grid_shape
        if (not isinstance(shape, (list, tuple)) or len(shape) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in shape)):
            raise ConfigError(f"simulation.structure.grid_shape must be two integers >= 1 (rows, columns), "
                              f"got {shape!r}")
        object.__setattr__(self, "grid_shape", tuple(shape))
        check_number("simulation.structure.ring_sites", self.ring_sites, integer=True)
        if self.ring_sites < 1:
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
