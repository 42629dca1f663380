"""``infer --link`` links each stack's localizations, and every stack's precision and resolution without ground
truth goes into its JSON summary and the batch's report.html."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import decode_mem
from decode_mem.infer import InferConfig, run_inference
from decode_mem.infer.console import ConsoleObserver
from decode_mem.io.localizations import read_localizations
from decode_mem.simulate.config import SimulationConfig
from decode_mem.simulate.stack import simulate_stack

SHIPPED_MODEL = Path(decode_mem.__file__).resolve().parents[1] / "data" / "models" / "default_2d.pt"


def test_infer_link_writes_molecules_and_the_report_shows_precision_and_frc(tmp_path: Path) -> None:
    if not SHIPPED_MODEL.is_file():
        pytest.skip("data/models/default_2d.pt is not there")
    shipped_model = SHIPPED_MODEL
    stack = tmp_path / "pores.tif"
    simulate_stack(SimulationConfig(frame_size=(48, 48), on_time=3.0,
                                    structure={"kind": "rings", "off_time": 30.0, "density": 2.0}), 150, stack, seed=4)
    out = tmp_path / "out"
    cfg = InferConfig(inputs=(str(stack),), out=str(out), model=str(shipped_model), formats=("csv", "parquet"),
                      link=True)
    report = run_inference(cfg, ConsoleObserver(quiet=True), command="python -m decode_mem.infer ... --link")
    assert not report.failures
    summary = json.loads((out / "pores.json").read_text())
    assert set(summary["outputs"]) == {"pores.csv", "pores.parquet", "pores_link.csv", "pores_group.csv",
                                       "pores_link.parquet", "pores_group.parquet", "pores.json"}
    locs = read_localizations(out / "pores.parquet")
    mols = read_localizations(out / "pores_link.parquet")
    assert 0 < len(mols) < len(locs) == summary["localizations"]
    assert summary["link"]["molecules"] == len(mols)
    q = summary["quality"]
    assert q["precision_nm"] > 0 and q["nena_nm"] > 0 and q["nena_picasso_nm"] < q["nena_nm"]
    # the quality pass links on its own, at a fixed radius (8 x the median σ; link's 'auto' adds its sigma gate)
    assert 0 < q["molecules"] < len(locs) and np.isfinite(q["frc_molecule_split"]["resolution_nm"])
    assert q["link_radius_nm"] == pytest.approx(2 * float(summary["link"]["radius_nm"]), rel=1e-3)
    html = (out / "report.html").read_text()
    for needle in ("Precision and resolution without ground truth: pores.tif", "NeNA as Picasso computes it",
                   "FRC resolution, halves by molecules", 'alt="FRC and NeNA of pores.tif'):
        assert needle in html, needle
