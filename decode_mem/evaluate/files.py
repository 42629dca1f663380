"""Metrics of localization files: predictions and ground truth read in any format, compared in nm."""

from __future__ import annotations

import json
import math
import os

from decode_mem.evaluate.metrics import Metrics, evaluate
from decode_mem.io.atomic import atomic_output
from decode_mem.io.localizations import read_localizations


def evaluate_files(pred: str | os.PathLike, gt: str | os.PathLike, *, pixel_size: float = 100.0,
                   tolerance_lat: float = 250.0, tolerance_ax: float = 500.0) -> Metrics:
    """Match two localization files (ThunderSTORM CSV, Picasso HDF5 + YAML, parquet; by suffix).

    ``pixel_size`` (nm) reads CSV/parquet nm into pixels; Picasso files are converted from their own pixel size.
    """
    return evaluate(read_localizations(pred, pixel_size=pixel_size), read_localizations(gt, pixel_size=pixel_size),
                    pixel_size=pixel_size, tolerance_lat=tolerance_lat, tolerance_ax=tolerance_ax)


def write_metrics_json(metrics: Metrics, path: str | os.PathLike) -> None:
    """The metrics as JSON (NaN as null), atomically."""
    payload = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in metrics.as_dict().items()}
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, allow_nan=False) + "\n")
