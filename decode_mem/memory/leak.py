"""Leak check: a straight line through a reading's history; a steady climb is reported and warned about."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_LABELS = {"rss_anon_mb": "RssAnon", "cuda_allocated_mb": "CUDA allocated"}


class MemoryLeakWarning(RuntimeWarning):
    """Memory grows steadily over a run.

    A RuntimeWarning, which Python shows by default; a ResourceWarning would be hidden by default.
    """


@dataclass(frozen=True)
class LeakTrend:
    """Linear trend of one reading: ``slope`` MB per ``per`` (``"1000 steps"`` or ``"hour"``) over ``n`` samples."""

    metric: str
    slope: float
    per: str
    r2: float
    n: int
    growth_mb: float  # fitted growth from the first to the last sample of the window
    leaking: bool

    def __str__(self) -> str:
        name = _LABELS.get(self.metric, self.metric)
        verdict = "possible leak" if self.leaking else "no leak"
        return (f"{name} grows by {self.slope:.1f} MB per {self.per} over {self.n} samples "
                f"(R^2={self.r2:.2f}, {self.growth_mb:+.1f} MB over the window): {verdict}")


@dataclass(frozen=True)
class LeakReport:
    """Result of ``MemoryTracker.check_leak``: one trend per reading checked (RssAnon first, then CUDA).

    ``slope``, ``r2`` and ``n`` are those of the first trend; ``leaking`` is true if any trend leaks.
    """

    trends: tuple[LeakTrend, ...] = ()

    @property
    def leaking(self) -> bool:
        return any(t.leaking for t in self.trends)

    @property
    def slope(self) -> float:
        return self.trends[0].slope if self.trends else float("nan")

    @property
    def r2(self) -> float:
        return self.trends[0].r2 if self.trends else float("nan")

    @property
    def n(self) -> int:
        return self.trends[0].n if self.trends else 0

    def __str__(self) -> str:
        return "; ".join(map(str, self.trends)) or "not enough samples"


def fit_trend(metric: str, x: np.ndarray, y: np.ndarray, *, scale: float, per: str, threshold: float,
              min_r2: float, min_growth_mb: float) -> LeakTrend:
    """Least-squares line through ``(x, y)``; a leak when ``slope * scale > threshold`` and the line both
    explains the data (R^2 >= ``min_r2``) and rises by at least ``min_growth_mb`` across the window."""
    slope, intercept = np.polyfit(x, y, 1)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - (slope * x + intercept)) ** 2)) / ss_tot if ss_tot > 0 else 0.0
    growth = float(slope * (x.max() - x.min()))
    leaking = bool(slope * scale > threshold and r2 >= min_r2 and growth >= min_growth_mb)
    return LeakTrend(metric, float(slope * scale), per, r2, len(x), growth, leaking)
