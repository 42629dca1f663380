"""What a two-colour ``infer`` run is asked to do (``TwoColour``, ``InferConfig.two_colour``); the run itself is
``infer.two_colour``.

``registration``: the file ``python -m decode_mem.register`` wrote; its layout says what the inputs are: split-view
movies (both halves in each file, as the registration's bead images were) or, for two cameras, channel 1's and
channel 2's movies in pairs. ``dyes``: ratiometric dyes (``io.channels.parse_dyes``); None: one dye per channel.
``model2``, ``camera2``: channel 2's own model and camera where they differ from channel 1's (``InferConfig.model``,
``camera``). ``pair_radius`` (nm): two localizations of the two channels in one frame closer than this are one
emitter; ``ratio_window``: the half-width of each dye's ratio window (``register.dyes``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from decode_mem.errors import ConfigError
from decode_mem.io.camera import camera_fields
from decode_mem.io.channels import Dye, dyes_text, parse_dyes

FORMATS = ("csv", "parquet", "picasso")  # what a two-colour run writes (Picasso: one file per channel or dye)
PAIR_RADIUS = 100.0  # nm


@dataclass(frozen=True)
class TwoColour:
    """Two colour channels of every movie (module docstring)."""

    registration: str
    dyes: Any = None
    model2: str | None = None
    camera2: str | None = None
    pair_radius: float = PAIR_RADIUS
    ratio_window: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "registration", str(self.registration))
        if self.dyes is not None and not (isinstance(self.dyes, tuple) and all(isinstance(d, Dye) for d in self.dyes)):
            object.__setattr__(self, "dyes", parse_dyes(self.dyes))
        radius = self.pair_radius
        number = isinstance(radius, (int, float)) and not isinstance(radius, bool)
        if not (number and math.isfinite(radius) and radius > 0):
            raise ConfigError(f"pair_radius must be > 0 nm, got {self.pair_radius!r}")
        if self.ratio_window is not None:
            if self.dyes is None:
                raise ConfigError("ratio_window: for ratiometric dyes (--dyes); one dye per channel has no ratios")
            if not 0 < self.ratio_window <= 0.5:
                raise ConfigError(f"ratio_window must be in (0, 0.5] (a share of the photons), got {self.ratio_window}")
        if self.model2 is not None and not os.path.isfile(self.model2):
            raise ConfigError(f"{self.model2}: channel 2's model (--model2) not found")
        if self.camera2 is not None:
            camera_fields(str(self.camera2))  # a preset or a readable camera YAML: a ConfigError before any work
        _ = self.loaded  # the registration file read and checked now

    @cached_property
    def loaded(self) -> Any:
        """The registration (``register.core.Registration``)."""
        from decode_mem.register.core import load_registration

        return load_registration(self.registration)

    def check(self, cfg: Any) -> None:
        """What a two-colour run cannot do with these ``InferConfig`` settings: a ConfigError before any work."""
        bad = [f for f in cfg.formats if f not in FORMATS]
        if bad:
            raise ConfigError(f"formats {', '.join(bad)}: a two-colour run writes {', '.join(FORMATS)}")
        for name, on in (("follow", cfg.follow), ("resume", cfg.resume), ("workers/scheduler", cfg.distributed),
                         ("write_probability_map", cfg.write_probability_map), ("link", cfg.link)):
            if on:
                raise ConfigError(f"{name}: not with two colours yet (docs/two_colour.md); run without it")
        if not self.loaded.split:
            paths = [Path(p) for p in cfg.inputs]
            if len(paths) % 2 or not all((p.exists() and not p.is_dir()) or p.suffix == ".zarr" for p in paths):
                raise ConfigError(f"{self.registration} is for two cameras: give channel 1's and channel 2's movies in "
                                  f"pairs (cam1.tif cam2.tif ...), got {len(paths)} input(s)"
                                  + ("" if len(paths) % 2 else " that are not all files"))

    def settings(self) -> dict[str, Any]:
        """What each movie's JSON summary records."""
        reg = self.loaded
        return {"registration": str(Path(self.registration).resolve()), "layout": reg.layout,
                "dyes": None if self.dyes is None else dyes_text(self.dyes), "model2": self.model2,
                "camera2": self.camera2, "pair_radius_nm": self.pair_radius, "ratio_window": self.ratio_window,
                "registration_tre_nm": reg.tre.get("leave_one_out_rms"), "axial_offset_nm": reg.axial_offset}
