"""How one emitter's localization errors correlate between the frames it is on in, by the frames between them.

A localizer that sees several frames at once (decode_mem's network takes frames t-1, t, t+1 for output t) and
errs partly in a way tied to the emitter itself (its sub-pixel position, its neighbours) makes errors that do
not average out over the frames of a blink. ``ErrorCorrelation`` is that correlation coefficient
``corr(e_t, e_{t+k})`` for one axis, the same for x and y (and z): one value per lag ``k`` up to two, and one
for every longer lag. Linking uses it for a molecule's combined precision, ``evaluate --no_truth`` to undo
its bias of NeNA.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from decode_mem.errors import ConfigError

MAX_LAGS = 2  # lags with a value of their own; linking follows a chain two steps back


@dataclass(frozen=True)
class ErrorCorrelation:
    """``by_lag[k - 1]``: correlation of the errors of localizations ``k`` frames apart (k = 1, 2); ``beyond``:
    of those further apart; ``source``: where the numbers come from."""

    by_lag: tuple[float, ...] = ()
    beyond: float = 0.0
    source: str = "independent errors"

    def __post_init__(self) -> None:
        values = (*self.by_lag, self.beyond)
        if len(self.by_lag) > MAX_LAGS or not all(np.isfinite(v) and 0.0 <= v < 1.0 for v in values):
            raise ConfigError(f"error correlation: at most {MAX_LAGS} lags and values in [0, 1), got {values}")
        object.__setattr__(self, "by_lag", tuple(float(v) for v in self.by_lag))
        object.__setattr__(self, "beyond", float(self.beyond))

    def at(self, lag: np.ndarray) -> np.ndarray:
        """The correlation at each ``lag`` (frames, >= 1)."""
        table = np.array([1.0, *self.by_lag, self.beyond])
        return table[np.clip(np.asarray(lag, np.int64), 0, len(table) - 1)]

    @property
    def consecutive(self) -> float:
        """The correlation of consecutive frames' errors (lag 1)."""
        return float(self.at(np.array([1]))[0])

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "by_lag": list(self.by_lag)}


INDEPENDENT = ErrorCorrelation()
# decode_mem's shipped 2-D model (data/models/default_2d.pt) on simulated EMCCD movies: the pooled correlation of
# the errors (prediction - truth) of one blinking event's localizations, lag 1, lag 2 and lag >= 3, measured by
# benchmarks/bench_postprocess.py over densities, photon counts and on-times (benchmarks/results/postprocess.md)
DECODE_MEM = ErrorCorrelation(by_lag=(0.71, 0.44), beyond=0.2,
                              source="decode_mem default_2d on simulations (benchmarks/results/postprocess.md)")
CORRELATIONS = {"decode_mem": DECODE_MEM, "none": INDEPENDENT}
