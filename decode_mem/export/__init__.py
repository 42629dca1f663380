"""Export a training run as a shippable model with its card (``python -m decode_mem.export``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.export.card import export_model

__all__ = ["export_model"]
__getattr__, __dir__ = lazy_exports(__name__, {"export_model": "card"})
