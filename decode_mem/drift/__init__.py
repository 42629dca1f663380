"""Drift correction from the localizations themselves (time segments, cross-correlation; no fiducials).

``estimate_drift(frame, x, y, DriftConfig())`` -> :class:`DriftEstimate`; ``correct_file(LOCS, DIR)`` writes the
corrected localizations, the drift table and its plot. CLI: ``python -m decode_mem.drift LOCS --out DIR``.
"""

from decode_mem.drift.config import DriftConfig
from decode_mem.drift.estimate import DriftEstimate, estimate_drift
from decode_mem.drift.files import DriftResult, correct_file, corrected_path, write_drift_plot

__all__ = ["DriftConfig", "DriftEstimate", "DriftResult", "correct_file", "corrected_path", "estimate_drift",
           "write_drift_plot"]
