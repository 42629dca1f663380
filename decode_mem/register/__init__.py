"""Two colour channels: registered with beads (``python -m decode_mem.register``), channel 2's localizations mapped
onto channel 1's, and dyes told apart by the share of their photons in each channel.

``register_beads`` -> ``Registration`` (saved as JSON, ``load_registration``; ``infer --registration`` takes it);
``register.transform``: the maps and their leave-one-out choice; ``register.beads``, ``register.match``: beads found,
fitted and paired; ``register.dyes``: localizations of the two channels paired, their ratio, the dye it names and the
crosstalk. Names load lazily (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.register.core import Registration, load_registration, register_beads
    from decode_mem.register.dyes import DyeAssigner
    from decode_mem.register.transform import Transform, choose_transform

__all__ = ["DyeAssigner", "Registration", "Transform", "choose_transform", "load_registration", "register_beads"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "Registration": "core", "load_registration": "core", "register_beads": "core",
    "DyeAssigner": "dyes",
    "Transform": "transform", "choose_transform": "transform",
})
