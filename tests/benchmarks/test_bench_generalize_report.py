"""bench_generalize's report: each model's lateral RMSE beside Picasso's on the emitters both found, in its own
table, from the rows' numbers (a row measured before there were such numbers shows none)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def _metrics(jaccard: float, rmse: float) -> dict:
    return {"jaccard": jaccard, "recall": jaccard, "precision": 1.0, "rmse_lat": rmse, "efficiency_lat": 60.0}


def test_the_report_gives_the_rmse_on_the_emitters_both_found(tmp_path: Path) -> None:
    from bench_generalize import COMMON, write_report

    row = {"name": "reference", "n_gt": 1000, "pixel_size": 100.0, "camera": "emccd",
           "generalist": _metrics(0.9, 14.0), "narrow": _metrics(0.88, 15.0), "light": _metrics(0.87, 26.5),
           "picasso": _metrics(0.77, 25.0), "picasso_info": {"box": 3, "ng": 1900.0, "jaccard_tune": 0.78}}
    row["generalist"][COMMON] = {"n": 760, "rmse_lat": 12.25, "picasso_rmse_lat": 23.5}
    row["light"][COMMON] = {"n": 750, "rmse_lat": 19.5, "picasso_rmse_lat": 23.75}
    old = {**row, "name": "an older row", "generalist": _metrics(0.9, 14.0), "light": _metrics(0.87, 26.5)}
    args = argparse.Namespace(model=str(ROOT / "data" / "models" / "default_2d.pt"))
    out = tmp_path / "g.md"
    write_report(out, [row, old], args, None, 60.0)
    lines = out.read_text().splitlines()
    start = lines.index("## Precision on the emitters both found")
    table = [s for s in lines[start:] if s.startswith("| ")]
    assert "light generalist (CPU): emitters, RMSE nm (Picasso's)" in table[0] and "narrow" not in table[0]
    assert table[1] == "| reference | 760, 12.2 (23.5) | 750, 19.5 (23.8) |"  # small, then light
    assert len(table) == 2  # the older row has no such numbers: not in this table
