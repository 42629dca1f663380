"""``infer --series``: a file holding series of different frame sizes localizes series 0 (and the series after it of
its size) by default, saying which series were left out and how to take one; ``series=k`` localizes series k."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tifffile
from infer_helpers import WarningLines

from decode_mem.errors import ConfigError
from decode_mem.infer import InferConfig, run_inference

ENGINE = {"block": 4, "chunk_size": 32, "batch_size": 8, "amp": "off", "threads": 1, "compile": False,
          "device": "cpu", "report": False, "formats": ("csv",)}


def test_series_picks_one_series_of_a_file_and_the_default_says_how(sample_frames, shipped_model, tmp_path):
    path = tmp_path / "two.tif"
    tifffile.imwrite(path, sample_frames[:8, :32, :32])
    tifffile.imwrite(path, np.ascontiguousarray(sample_frames[8:14, :40, :40]), append=True)  # another frame size
    seen = WarningLines()
    report = run_inference(InferConfig(inputs=(str(path),), out=str(tmp_path / "default"), model=str(shipped_model),
                                       **ENGINE), seen)
    assert [s.frames for s in report.stacks] == [8]
    assert any("40x40" in line and "left out" in line and "infer --series k" in line for line in seen.lines), \
        seen.lines
    report = run_inference(InferConfig(inputs=(str(path),), out=str(tmp_path / "one"), model=str(shipped_model),
                                       series=1, **ENGINE))
    summary = json.loads((tmp_path / "one" / "two.json").read_text())
    assert [s.frames for s in report.stacks] == [6] and summary["shape"] == [6, 40, 40]
    assert summary["settings"]["series"] == 1
    tifffile.imwrite(tmp_path / "alone.tif", np.ascontiguousarray(sample_frames[8:14, :40, :40]))
    run_inference(InferConfig(inputs=(str(tmp_path / "alone.tif"),), out=str(tmp_path / "alone"),
                              model=str(shipped_model), **ENGINE))
    assert (tmp_path / "one" / "two.csv").read_text() == (tmp_path / "alone" / "alone.csv").read_text()


def test_series_is_refused_with_follow(tmp_path):
    with pytest.raises(ConfigError, match="series"):
        InferConfig(inputs=(str(tmp_path / "m.tif"),), out=str(tmp_path / "o"), series=1, follow=True)
