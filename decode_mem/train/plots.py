"""Training curves as a PNG, drawn once from the CSV log at the end of a run."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np


def plot_training(log_csv: Path, out_png: Path) -> Path | None:
    """Loss terms (count, loc, bg; distill with a teacher) and validation Jaccard / RMSE against step; None if the
    log is empty."""
    from matplotlib.figure import Figure  # no pyplot: no global figure state

    with open(log_csv, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        return None

    def column(name: str) -> tuple[np.ndarray, np.ndarray]:
        pairs = [(float(r["step"]), float(r[name])) for r in rows if r.get(name) not in (None, "")]
        return (np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])) if pairs else (np.zeros(0),) * 2

    fig = Figure(figsize=(11, 4))
    ax_loss, ax_val = fig.subplots(1, 2)
    for name in ("loss", "count", "loc", "bg", "distill", "val_loss"):
        x, y = column(name)
        if len(x):
            ax_loss.plot(x, y, label=name, marker="o" if name.startswith("val") else None)
    ax_loss.set(xlabel="step", ylabel="loss (per frame)", title="loss terms")
    ax_loss.legend()
    x, y = column("jaccard")
    ax_val.plot(x, y, "o-", color="C0", label="Jaccard")
    ax_val.set(xlabel="step", ylabel="Jaccard", ylim=(0, 1), title="validation")
    ax_rmse = ax_val.twinx()
    x, y = column("rmse_lat")
    ax_rmse.plot(x, y, "s--", color="C3", label="RMSE lateral")
    ax_rmse.set_ylabel("RMSE lateral [nm]")
    handles = ax_val.get_lines() + ax_rmse.get_lines()
    ax_val.legend(handles, [h.get_label() for h in handles], loc="center right")
    fig.tight_layout()
    tmp = out_png.with_name(out_png.name + ".partial.png")
    fig.savefig(tmp, dpi=100)
    tmp.replace(out_png)
    return out_png
