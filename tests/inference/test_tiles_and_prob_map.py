"""``--use_chunking`` (tiles of --chunk_size) and ``--whole_frames`` give the same emitters; ``--prob_map`` writes
the detection probability of every pixel, equal to ``process_large_image``'s, block by block and atomically."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tifffile
import torch
import zarr
from numerics import assert_same_emitters

from decode_mem.infer import process_large_image
from decode_mem.infer.__main__ import main
from decode_mem.io.localizations import read_localizations
from decode_mem.model.checkpoint import load_model
from decode_mem.postprocess import PostprocessConfig


def _write(tmp_path: Path, frames: np.ndarray) -> Path:
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "s.tif"
    tifffile.imwrite(path, frames)
    return path


def test_tiles_and_whole_frames_give_the_same_emitters(shipped_model, sample_frames, tmp_path) -> None:
    stack = _write(tmp_path, np.tile(sample_frames[:8], (1, 3, 3)))  # 192 x 192 px: several tiles of 32 + halo
    common = [str(stack), "--model", str(shipped_model), "--batch_size", "2", "--device", "cpu", "--engine", "torch",
              "--quiet"]  # exact on a CPU; CUDA: tests/tiling (fp32, TF32 off)
    assert main([*common, "--use_chunking", "--chunk_size", "32", "--out", str(tmp_path / "tiles")]) == 0
    assert main([*common, "--whole_frames", "--out", str(tmp_path / "whole")]) == 0
    tiles = read_localizations(tmp_path / "tiles" / "s.csv", pixel_size=100.0)
    whole = read_localizations(tmp_path / "whole" / "s.csv", pixel_size=100.0)
    # the same emitters to sub-nm (px 1e-3), but for those on the threshold's fence (another summation order)
    assert_same_emitters(tiles, whole, PostprocessConfig().threshold, at_least=200)
    import json
    assert json.loads((tmp_path / "tiles" / "s.json").read_text())["sizes"]["plan"]["n_tiles"] > 1
    assert json.loads((tmp_path / "whole" / "s.json").read_text())["sizes"]["plan"]["n_tiles"] == 1


def test_probability_map_matches_process_large_image(shipped_model, sample_frames, tmp_path) -> None:
    frames = sample_frames[:9]
    stack = _write(tmp_path, frames)
    out = tmp_path / "out"
    assert main([str(stack), "--model", str(shipped_model), "--out", str(out), "--prob_map", "--device", "cpu",
                 "--use_chunking",
                 "--chunk_size", "32", "--batch_size", "2", "--amp", "off", "--engine", "torch",
                 "--quiet"]) == 0  # fp32 torch, as the reference
    assert not list(out.glob("*.partial"))
    prob = zarr.open_array(str(out / "s_prob.zarr"), mode="r")
    assert prob.shape == frames.shape and prob.dtype == np.float16
    model = load_model(shipped_model)
    for t in (0, 4, 8):  # first, middle and last frame (edge frames repeated as context)
        window = frames[[max(t - 1, 0), t, min(t + 1, len(frames) - 1)]]
        ref = process_large_image(window, model, 64, amp="off", batch_size=1)
        np.testing.assert_allclose(prob[t], torch.sigmoid(torch.from_numpy(ref[0])).numpy(), atol=2e-3)  # float16
