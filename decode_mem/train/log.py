"""The training log: one CSV row per logged step (training and validation), appended and flushed as it goes."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

LOG_COLUMNS = ("step", "time_s", "lr", "loss", "count", "loc", "bg", "distill", "grad_norm", "val_loss", "val_count",
               "val_loc", "val_bg", "jaccard", "recall", "precision", "rmse_lat", "rmse_ax")


class TrainLog:
    """CSV of training and validation rows (a log: appended and flushed row by row).

    A resumed run drops the rows logged after its checkpoint by writing the rows it keeps to a temporary file
    that replaces the log in one rename, then appends: a run killed at any moment leaves every row that reached
    disk before (rewriting the log in place lost the rows past the first buffer's 8 KB to a kill in the
    run's first 50 steps)."""

    def __init__(self, path: Path, *, start_step: int) -> None:
        from decode_mem.io.atomic import atomic_output

        rows, columns, whole = [], None, True
        if path.exists():
            with open(path, newline="") as fh:  # read once: the rows and whether the last one is whole
                text = fh.read()
            reader = csv.DictReader(io.StringIO(text, newline=""))
            rows, columns = list(reader), tuple(reader.fieldnames or ())
            whole = text.endswith("\n")
            if not whole:  # a last row cut short (a disk full, a power cut): dropped, never appended to
                rows = rows[:-1]
        kept = [r for r in rows if start_step and int(r["step"]) <= start_step]
        # rewritten for a fresh run, rows past the checkpoint, other columns or a cut row; else appended to
        if len(kept) < len(rows) or columns != LOG_COLUMNS or not whole:
            with atomic_output(path) as tmp, open(tmp, "w", newline="") as fh:
                writer = csv.DictWriter(fh, LOG_COLUMNS, extrasaction="ignore")
                writer.writeheader()
                writer.writerows(kept)
        self._fh = open(path, "a", newline="")  # noqa: SIM115 - a log kept open for the run
        self._writer = csv.DictWriter(self._fh, LOG_COLUMNS, extrasaction="ignore")

    def write(self, row: dict[str, Any]) -> None:
        self._writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()
