"""A Cancel (``stop_requested``) while following a growing stack: the blocks done are kept as a part, the run says
where it stopped, and ``--resume`` finishes with the files of one uninterrupted run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tifffile

from decode_mem.errors import Stopped
from decode_mem.infer import InferConfig, run_inference
from decode_mem.infer.observe import InferObserver

ENGINE = {"block": 4, "chunk_size": 32, "batch_size": 8, "amp": "off", "threads": 1, "compile": False,
          "device": "cpu"}


class Cancel(InferObserver):
    """A Cancel button pressed after the second block."""

    def __init__(self) -> None:
        self.blocks = 0

    def block_done(self, stem, frames, result) -> None:
        self.blocks += 1

    def stop_requested(self) -> bool:
        return self.blocks >= 2


def follow(path, out, model, **kw) -> InferConfig:
    return InferConfig(inputs=(str(path),), out=str(out), model=str(model), follow=True, idle_timeout=0.5,
                       refresh=0.05, formats=("csv",), **ENGINE, **kw)


def test_a_cancelled_follow_keeps_its_blocks_and_resumes_to_one_runs_files(sample_frames, shipped_model, tmp_path):
    frames = np.ascontiguousarray(sample_frames[:16, 16:48, 16:48])
    path = tmp_path / "movie.tif"
    for f in frames:
        tifffile.imwrite(path, f, append=True)
    run_inference(follow(path, tmp_path / "whole", shipped_model))
    with pytest.raises(Stopped) as stop:
        run_inference(follow(path, tmp_path / "out", shipped_model), Cancel())
    assert stop.value.frame == 8 and "stopped at frame 8" in str(stop.value) and "--resume" in str(stop.value)
    manifest = json.loads((tmp_path / "out" / "movie.live" / "parts.json").read_text())
    assert manifest["parts"][-1]["stop"] == 8  # the two blocks done, kept as a part (not dropped with the open one)
    assert json.loads((tmp_path / "out" / "movie.json").read_text())["status"] == "stopped"
    run_inference(follow(path, tmp_path / "out", shipped_model, resume=True))
    assert (tmp_path / "out" / "movie.csv").read_text() == (tmp_path / "whole" / "movie.csv").read_text()
