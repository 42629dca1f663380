"""The training log: one CSV row per logged step (training and validation), appended and flushed as it goes."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

LOG_COLUMNS = ("step", "time_s", "lr", "loss", "count", "loc", "bg", "grad_norm", "val_loss", "val_count",
               "val_loc", "val_bg", "jaccard", "recall", "precision", "rmse_lat", "rmse_ax")


class TrainLog:
    """CSV of training and validation rows (a log: appended and flushed row by row)."""

    def __init__(self, path: Path, *, start_step: int) -> None:
        kept = []
        if start_step and path.exists():  # a resumed run drops rows logged after its checkpoint
            with open(path, newline="") as fh:
                kept = [r for r in csv.DictReader(fh) if int(r["step"]) <= start_step]
        self._fh = open(path, "w", newline="")  # noqa: SIM115 - a log kept open for the run
        self._writer = csv.DictWriter(self._fh, LOG_COLUMNS, extrasaction="ignore")
        self._writer.writeheader()
        self._writer.writerows(kept)

    def write(self, row: dict[str, Any]) -> None:
        self._writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()
