"""Damaged frames found by dask workers (each reads its own frame ranges) reach ``<stem>.json`` and the warning as
they do in one process: the ranges' records travel back with their emitters."""

from __future__ import annotations

import json

import numpy as np
import tifffile
from infer_helpers import WarningLines

from decode_mem.infer import InferConfig, run_inference


def test_dask_workers_report_the_frames_they_repaired(sample_frames, shipped_model, tmp_path):
    movie = np.ascontiguousarray(sample_frames[:16, 16:48, 16:48]).astype(np.float32)
    movie[2, 0, :5] = np.nan  # read by the first range's worker
    movie[13] = np.inf  # read by the last range's worker
    tifffile.imwrite(tmp_path / "nan.tif", movie)
    obs = WarningLines()
    cfg = InferConfig(inputs=(str(tmp_path / "nan.tif"),), out=str(tmp_path / "out"), model=str(shipped_model),
                      formats=("csv",), block=4, chunk_size=32, batch_size=8, workers=2, frames_per_task=4,
                      threads=1, max_damage=0.2)  # 2 of 16 frames: above the default 5 % share
    report = run_inference(cfg, obs)
    assert report.ok
    summary = json.loads((tmp_path / "out" / "nan.json").read_text())
    assert summary["damage"]["frames"] == [2, 13]
    assert [w for w in obs.lines if "2 damaged frame record(s)" in w]
    assert "nan" not in (tmp_path / "out" / "nan.csv").read_text().lower()
