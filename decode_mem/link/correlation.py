"""How one emitter's localization errors correlate between the frames it is on in, by the frames between them.

A localizer that sees several frames at once (decode_mem's network takes frames t-1, t, t+1 for output t) and
errs partly in a way tied to the emitter itself (its sub-pixel position, its neighbours) makes errors that do
not average out over the frames of a blink. ``ErrorCorrelation`` is that correlation coefficient
``corr(e_t, e_{t+k})`` for one axis, the same for x and y (and z): one value per lag ``k`` up to two, and one
for every longer lag. Linking uses it for a molecule's combined precision, ``evaluate --no_truth`` to undo
its bias of NeNA.

``unseen_error_factor`` belongs to the same error model: how much of the localizer's RMSE consecutive differences do
not see (errors shared by consecutive frames beyond what ρ says, differences beyond the link radius), the true RMSE
over ``evaluate --no_truth``'s RMS σ x σ scale on simulations where linking is not crowded. ``--no_truth`` states
its precision times it.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import ConfigError
from decode_mem.io.localizations import run_summary

MAX_LAGS = 2  # lags with a value of their own; linking follows a chain two steps back


@dataclass(frozen=True)
class ErrorCorrelation:
    """``by_lag[k - 1]``: correlation of the errors of localizations ``k`` frames apart (k = 1, 2); ``beyond``:
    of those further apart; ``unseen_error_factor``: the true RMSE over the RMSE the consecutive differences show
    (module docstring; 1: they show all of it); ``source``: where the numbers come from."""

    by_lag: tuple[float, ...] = ()
    beyond: float = 0.0
    source: str = "independent errors"
    unseen_error_factor: float = 1.0

    def __post_init__(self) -> None:
        values = (*self.by_lag, self.beyond)
        if len(self.by_lag) > MAX_LAGS or not all(np.isfinite(v) and 0.0 <= v < 1.0 for v in values):
            raise ConfigError(f"error correlation: at most {MAX_LAGS} lags and values in [0, 1), got {values}")
        if not (np.isfinite(self.unseen_error_factor) and self.unseen_error_factor > 0):
            raise ConfigError(f"error correlation: the unseen-error factor must be > 0, got {self.unseen_error_factor}")
        object.__setattr__(self, "by_lag", tuple(float(v) for v in self.by_lag))
        object.__setattr__(self, "beyond", float(self.beyond))
        object.__setattr__(self, "unseen_error_factor", float(self.unseen_error_factor))

    def table(self) -> np.ndarray:
        """The correlation by lag: index 0 (1.0), the lags with their own, and last ``beyond`` (a larger lag is
        clipped to it)."""
        return np.array([1.0, *self.by_lag, self.beyond])

    def at(self, lag: np.ndarray) -> np.ndarray:
        """The correlation at each ``lag`` (frames, >= 1)."""
        table = self.table()
        return table[np.clip(np.asarray(lag, np.int64), 0, len(table) - 1)]

    @property
    def consecutive(self) -> float:
        """The correlation of consecutive frames' errors (lag 1)."""
        return float(self.at(np.array([1]))[0])

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "by_lag": list(self.by_lag)}


INDEPENDENT = ErrorCorrelation()
# Each shipped model's, measured on simulated EMCCD movies by benchmarks/bench_postprocess.py (densities, photon
# counts, on-times, rings, filaments): the correlation of the errors (prediction - truth) of one blinking event's
# localizations, lag 1, lag 2 and lag >= 3. The small model (data/models/default_2d.pt; benchmarks/results/
# postprocess.md): of every matched localization (the median over the report's 7 movies not held out is 0.71 /
# 0.43 / 0.17). Taken of the well-placed ones only, as for the wide model (0.68 / 0.33 / 0.13), its stated
# precision (then RMS σ x σ scale) held within 15 % of the true RMSE on 8 of the 13 movies instead of 10
# (postprocess_small_well_placed.md).
# The unseen-error factor of each model: 1 / the median of RMS σ x σ scale over the true RMSE on the report's
# movies not held out and not crowded for linking (the 5 uniform ones of the first 7), the σ scale counting a jump
# (|u| > evaluate.no_truth.JUMP) as independent errors: 0.877 for the small model, 0.897 for the wide one (ad hoc
# on the reports' own seeds before the rerun at the commit that set them; postprocess.json, postprocess_wide.json
# hold the record). Chosen on those 5; the others were not used for it. Before the jump rule both were 1.11 (0.903
# and 0.901 at 400cb64).
DECODE_MEM = ErrorCorrelation(by_lag=(0.71, 0.44), beyond=0.2, unseen_error_factor=1.14,
                              source="decode_mem default_2d on simulations (benchmarks/results/postprocess.md)")
# The wide model (data/models/default_2d_wide.pt; benchmarks/results/postprocess_wide.md): of the well-placed
# localizations (within 8 median σ of their own emitter: what linking joins), the median over the 7 movies not held
# out (0.58-0.81 by movie at lag 1 in the rerun at 30527ec). Of every matched localization (0.66 / 0.45 / 0.12:
# blends of two emitters and gross errors correlate less) its stated precision (then RMS σ x σ scale) held on 2 of
# 13 movies instead of 9
# (postprocess_wide_all_matched.md).
DECODE_MEM_WIDE = ErrorCorrelation(by_lag=(0.71, 0.44), beyond=0.09, unseen_error_factor=1.11,
                                   source="decode_mem default_2d_wide on simulations "
                                          "(benchmarks/results/postprocess_wide.md)")
# The light model (data/models/default_2d_light.pt, the CPU default where its verdict passes it; benchmarks/results/
# postprocess_light.md): as for the small model, its sibling, of every matched localization, the median over the 7
# movies not held out (0.68 / 0.44 / 0.26 in the run at 54ca3ec with the small model's constants, the same at 4ddca6a
# with these; well placed only: 0.61 / 0.37 / 0.24). Its unseen-error factor: 1 / the median of RMS σ x σ scale over
# the true RMSE on the 5 uniform movies of the first 7: 1.157 in the run at 4ddca6a with these correlations (and a
# provisional 1.11); postprocess_light.md is the run with it.
DECODE_MEM_LIGHT = ErrorCorrelation(by_lag=(0.68, 0.44), beyond=0.26, unseen_error_factor=1.16,
                                    source="decode_mem default_2d_light on simulations "
                                           "(benchmarks/results/postprocess_light.md)")
CORRELATIONS = {"decode_mem": DECODE_MEM, "decode_mem_wide": DECODE_MEM_WIDE, "decode_mem_light": DECODE_MEM_LIGHT,
                "none": INDEPENDENT}
# shipped model file -> its own (the names of model.checkpoint.SHIPPED_MODEL and model.choice.SHIPPED_WIDE_MODEL and
# SHIPPED_LIGHT_MODEL, not imported: they bring torch; tests/link/test_correlation_by_model.py holds them equal)
MEASURED = {"default_2d.pt": DECODE_MEM, "default_2d_wide.pt": DECODE_MEM_WIDE, "default_2d_light.pt": DECODE_MEM_LIGHT}


def correlation_of(choice: str) -> ErrorCorrelation | None:
    """A ``--correlation`` choice of the CLIs: 'auto' is None (``for_file`` decides), the others
    ``CORRELATIONS``'."""
    return None if choice == "auto" else CORRELATIONS[choice]


def for_model(model: str | os.PathLike | None) -> ErrorCorrelation:
    """The correlation measured for the shipped model file ``model`` (by its name; None: the small shipped model).
    Another model's (one made by ``fit`` or ``train``) is not measured: the small shipped model's, its ``source``
    saying so."""
    if model is None:
        return DECODE_MEM
    name = Path(model).name
    if name in MEASURED:
        return MEASURED[name]
    return replace(DECODE_MEM, source=f"not measured for {name}: {DECODE_MEM.source}")


def for_file(locs: str | os.PathLike) -> ErrorCorrelation:
    """The correlation of the model whose ``infer`` run wrote ``locs``: the model named by the run's summary beside
    it (``io.localizations.run_summary``: ``<stem>.json``, or for a file derived from it, ``<stem>_undrift.csv`` say,
    the longest such stem); the small shipped model's where no summary names one."""
    try:
        return for_model(run_summary(locs)["model_choice"]["path"])
    except (KeyError, TypeError):
        return DECODE_MEM
