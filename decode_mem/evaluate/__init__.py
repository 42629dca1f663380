"""Evaluation: match localizations to ground truth and compute SMLM-challenge-2016 metrics
(``python -m decode_mem.evaluate``); names load lazily.

    metrics = evaluate(pred_table, gt_table, pixel_size=100.0)       # or evaluate_files("pred.csv", "gt.csv")
    acc = StreamingMetrics(pixel_size=100.0); acc.update(pred, gt); acc.result()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.evaluate.files import evaluate_files, write_metrics_json
    from decode_mem.evaluate.metrics import (
        Matches,
        Metrics,
        StreamingMetrics,
        common_rmse_lat,
        efficiency,
        evaluate,
        match_emitters,
    )

__all__ = ["Matches", "Metrics", "StreamingMetrics", "common_rmse_lat", "efficiency", "evaluate", "evaluate_files",
           "match_emitters", "write_metrics_json"]
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(["Matches", "Metrics", "StreamingMetrics", "common_rmse_lat", "efficiency", "evaluate",
                     "match_emitters"], "metrics"),
    "evaluate_files": "files", "write_metrics_json": "files"})
