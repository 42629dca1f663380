"""What a two-colour simulation is asked for (``TwoColourConfig``) and the true map between its channels.

``ChannelMapping`` says where a point that channel 1 images at pixel ``(x, y)`` appears in channel 2: an affine map
(rotation, scale, shift about the field's centre) plus a smooth non-linear field, the sum of a barrel term and a
few long-wavelength sinusoids (at most about one period over the field), scaled so that its largest displacement
over the field is ``distortion_nm``. Channel 2 also focuses ``axial_offset`` nm apart: an emitter at depth ``z``
is seen by channel 2 as if at ``z + axial_offset`` (chromatic focal shift). The mapping is drawn from its own seed
and can be written to JSON and read back (``to_dict``/``from_dict``): the truth a registration is measured against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from decode_mem.config import check_keys
from decode_mem.errors import ConfigError
from decode_mem.io.channels import LAYOUTS, PRESETS, Dye, parse_dyes

CHANNEL2_KEYS = ("psf_sigma", "bg")  # SimulationConfig fields channel 2 may set for itself
MODES = 4  # sinusoids of the non-linear field


@dataclass(frozen=True)
class TwoColourConfig:
    """A two-colour movie (or bead slide): ``layout`` (``io.channels.LAYOUTS``: a split-view preset, or
    'two-files' for two cameras), ``dyes`` (``io.channels.parse_dyes``; default one dye per channel) and the share of
    emitters of each (``dye_shares``, default equal), the map between the channels (``ChannelMapping``: its
    non-linear part ``distortion_nm`` at most, ``rotation_deg``, ``scale``, ``shift`` (x, y) px, ``axial_offset`` nm,
    drawn from ``seed``) and what channel 2 has of its own (``channel2``: ``psf_sigma``, ``bg``)."""

    layout: str = "left-right"
    dyes: Any = "dye1=0,dye2=1"
    dye_shares: tuple[float, ...] | None = None
    distortion_nm: float = 300.0
    rotation_deg: float = 0.4
    scale: float = 1.003
    shift: tuple[float, float] = (2.5, -1.5)
    axial_offset: float = 0.0
    seed: int = 1
    channel2: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ConfigError(f"two_colour.layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        dyes = self.dyes if isinstance(self.dyes, tuple) and all(isinstance(d, Dye) for d in self.dyes) \
            else parse_dyes(self.dyes)
        object.__setattr__(self, "dyes", dyes)
        if self.dye_shares is not None:
            shares = tuple(float(s) for s in self.dye_shares)
            if len(shares) != len(dyes) or min(shares) < 0 or not sum(shares) > 0:
                raise ConfigError(f"two_colour.dye_shares: one share >= 0 per dye ({len(dyes)}), not all 0, got "
                                  f"{self.dye_shares!r}")
            object.__setattr__(self, "dye_shares", shares)
        for name in ("distortion_nm", "rotation_deg", "scale", "axial_offset"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"two_colour.{name} must be a number, got {value!r}")
        if self.distortion_nm < 0 or not self.scale > 0:
            raise ConfigError(f"two_colour: distortion_nm must be >= 0 and scale > 0, got {self.distortion_nm!r}, "
                              f"{self.scale!r}")
        shift = tuple(float(v) for v in self.shift)
        if len(shift) != 2 or not all(math.isfinite(v) for v in shift):
            raise ConfigError(f"two_colour.shift must be two numbers (x, y) in px, got {self.shift!r}")
        object.__setattr__(self, "shift", shift)
        extra = [k for k in self.channel2 if k not in CHANNEL2_KEYS]
        if extra:
            raise ConfigError(f"two_colour.channel2: {extra} cannot differ between the channels; "
                              f"choose from {', '.join(CHANNEL2_KEYS)}")
        object.__setattr__(self, "channel2", dict(self.channel2))

    @classmethod
    def from_dict(cls, params: dict[str, Any] | None) -> TwoColourConfig:
        params = dict(params or {})
        check_keys(cls, params, "two_colour")
        return cls(**params)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["dyes"] = {d.name: d.ratio for d in self.dyes}
        out["shift"] = list(self.shift)
        out["dye_shares"] = None if self.dye_shares is None else list(self.dye_shares)
        return out

    @property
    def split(self) -> bool:
        """Both channels on one chip (a preset layout) rather than two files."""
        return self.layout in PRESETS

    @property
    def ratios(self) -> np.ndarray:
        return np.array([d.ratio for d in self.dyes], np.float64)

    def dye_of(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The dye (0-based index) of emitters at ``x``, ``y`` px: a hash of the positions' bits, so an emitter (or
        a structure's site) keeps its dye over every frame it blinks in, whatever the blocks."""
        u = _unit_hash(np.asarray(x, np.float32), np.asarray(y, np.float32), self.seed)
        shares = np.ones(len(self.dyes)) if self.dye_shares is None else np.asarray(self.dye_shares, np.float64)
        edges = np.cumsum(shares) / shares.sum()
        return np.minimum(np.searchsorted(edges, u, side="right"), len(self.dyes) - 1)


def _unit_hash(x: np.ndarray, y: np.ndarray, seed: int) -> np.ndarray:
    """Numbers in [0, 1), a pure function of the float32 bits of ``x``, ``y`` and ``seed`` (splitmix64)."""
    a = x.view(np.uint32).astype(np.uint64)
    b = y.view(np.uint32).astype(np.uint64)
    h = (a << np.uint64(32)) | b
    h ^= np.uint64((int(seed) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        h = h ^ (h >> np.uint64(31))
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)


@dataclass(frozen=True)
class ChannelMapping:
    """Channel 1 px -> channel 2 px (module docstring). ``frame`` (H, W) of channel 1; ``matrix`` (2x2) and
    ``shift`` (x, y px) the affine part about ``centre``; the non-linear part: ``radial`` (barrel, px at the field's
    corner before scaling), ``modes`` (m, 6) rows of wave vector (kx, ky) in cycles per half-field, phases (x, y) and
    amplitudes (x, y), times ``gain`` (px); ``axial_offset`` nm."""

    frame: tuple[int, int]
    matrix: tuple[tuple[float, float], tuple[float, float]]
    shift: tuple[float, float]
    radial: float
    modes: tuple[tuple[float, ...], ...]
    gain: float
    axial_offset: float = 0.0

    @classmethod
    def draw(cls, frame: tuple[int, int], pixel_size: float, cfg: TwoColourConfig) -> ChannelMapping:
        """The mapping of ``cfg`` for channel-1 frames of ``frame`` px at ``pixel_size`` nm."""
        rng = np.random.default_rng([int(cfg.seed), 75])
        a = math.radians(cfg.rotation_deg)
        c, s = cfg.scale * math.cos(a), cfg.scale * math.sin(a)
        matrix = ((c, -s), (s, c))
        k = rng.uniform(0.3, 0.6, MODES) * np.exp(1j * rng.uniform(0, 2 * np.pi, MODES))
        modes = np.column_stack([k.real, k.imag, rng.uniform(0, 2 * np.pi, (MODES, 2)),
                                 rng.normal(0, 1, (MODES, 2))])
        base = cls(tuple(int(v) for v in frame), matrix, cfg.shift, float(rng.choice([-1.0, 1.0])),
                   tuple(tuple(float(v) for v in row) for row in modes), 1.0, float(cfg.axial_offset))
        gx, gy = base.grid(65)
        fx, fy = base.field(gx, gy)
        biggest = float(np.sqrt(fx**2 + fy**2).max())
        gain = (cfg.distortion_nm / pixel_size) / biggest if biggest > 0 else 0.0
        return cls(base.frame, matrix, cfg.shift, base.radial, base.modes, gain, float(cfg.axial_offset))

    @property
    def centre(self) -> tuple[float, float]:
        h, w = self.frame
        return (w - 1) / 2.0, (h - 1) / 2.0

    @property
    def half(self) -> float:
        return max(self.frame) / 2.0

    def grid(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """An ``n × n`` grid of points over channel 1's frame (pixel centres at the edges)."""
        h, w = self.frame
        gx, gy = np.meshgrid(np.linspace(0, w - 1, n), np.linspace(0, h - 1, n))
        return gx.ravel(), gy.ravel()

    def field(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The non-linear displacement (px) at channel-1 points ``x``, ``y``."""
        cx, cy = self.centre
        u, v = (np.asarray(x, np.float64) - cx) / self.half, (np.asarray(y, np.float64) - cy) / self.half
        r2 = u * u + v * v
        fx, fy = 0.5 * self.radial * r2 * u, 0.5 * self.radial * r2 * v
        for kx, ky, px, py, ax, ay in self.modes:
            arg = np.pi * (kx * u + ky * v)
            fx = fx + ax * np.sin(arg + px)
            fy = fy + ay * np.sin(arg + py)
        return self.gain * fx, self.gain * fy

    def __call__(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Channel-2 px of channel-1 px ``x``, ``y``."""
        cx, cy = self.centre
        dx, dy = np.asarray(x, np.float64) - cx, np.asarray(y, np.float64) - cy
        (a, b), (c, d) = self.matrix
        fx, fy = self.field(x, y)
        return cx + a * dx + b * dy + self.shift[0] + fx, cy + c * dx + d * dy + self.shift[1] + fy

    def to_dict(self) -> dict[str, Any]:
        return {"frame": list(self.frame), "matrix": [list(r) for r in self.matrix], "shift": list(self.shift),
                "radial": self.radial, "modes": [list(m) for m in self.modes], "gain": self.gain,
                "axial_offset": self.axial_offset,
                "what": "channel-1 px (x, y) -> channel-2 px: centre + matrix (p - centre) + shift + field(p); "
                        "decode_mem.simulate.colours.ChannelMapping"}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChannelMapping:
        return cls(tuple(d["frame"]), tuple(tuple(r) for r in d["matrix"]), tuple(d["shift"]), float(d["radial"]),
                   tuple(tuple(m) for m in d["modes"]), float(d["gain"]), float(d.get("axial_offset", 0.0)))
