"""A folder given to ``infer``: an image sequence (one frame per file, as cameras and Micro-Manager write them) is
one movie, read as ``open_stack`` and ``--follow`` read it; a folder of multi-frame stacks is a batch of stacks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tifffile

from decode_mem.infer import InferConfig, run_inference
from decode_mem.infer.config import find_stacks

ENGINE = {"block": 4, "chunk_size": 32, "batch_size": 8, "amp": "off", "threads": 1, "compile": False,
          "device": "cpu", "report": False}


def _config(inputs: Path, out: Path, model: Path) -> InferConfig:
    return InferConfig(inputs=(str(inputs),), out=str(out), model=str(model), formats=("csv",), **ENGINE)


def test_an_image_sequence_folder_is_one_movie_equal_to_its_stack(sample_frames, shipped_model, tmp_path):
    frames = np.ascontiguousarray(sample_frames[:12, 16:48, 16:48])
    sequence = tmp_path / "sequence"
    sequence.mkdir()
    for i, frame in enumerate(frames):  # frame_2 before frame_10: natural order
        tifffile.imwrite(sequence / f"frame_{i}.tif", frame)
    assert find_stacks((str(sequence),)).stacks == (sequence.resolve(),)
    report = run_inference(_config(sequence, tmp_path / "out", shipped_model))
    assert [s.frames for s in report.stacks] == [12]
    tifffile.imwrite(tmp_path / "movie.tif", frames)
    run_inference(_config(tmp_path / "movie.tif", tmp_path / "whole", shipped_model))
    text = (tmp_path / "out" / "sequence.csv").read_text()
    assert text == (tmp_path / "whole" / "movie.csv").read_text() and len(text.splitlines()) > 1


def test_a_folder_of_stacks_is_a_batch(sample_frames, tmp_path):
    for name, cut in (("a.tif", slice(0, 6)), ("b.tif", slice(6, 12))):
        tifffile.imwrite(tmp_path / name, sample_frames[cut])
    assert [p.name for p in find_stacks((str(tmp_path),)).stacks] == ["a.tif", "b.tif"]
