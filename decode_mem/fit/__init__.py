"""From a user's movie to a matched model in one command (``python -m decode_mem.fit``): calibrate, use or
fine-tune the shipped generalist on matching simulations within a time budget, validate, localize. Names load
lazily.

    report = fit_movies(FitConfig(movies=("movie.tif",), out="fitted", budget_minutes=5))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.fit.config import FitConfig
    from decode_mem.fit.core import FitReport, fit_movies

__all__ = ["FitConfig", "FitReport", "fit_movies"]
__getattr__, __dir__ = lazy_exports(__name__, {"FitConfig": "config", "FitReport": "core", "fit_movies": "core"})
