"""The report's widefield image is the mean of the stack's first frames as the run read them: the frames are not
read a second time after the loop (for a 2048² movie, its first 1000 frames are 8 GB)."""

from __future__ import annotations

import numpy as np
import pytest
from infer_helpers import SAMPLE

import decode_mem.infer.batch_report as batch_report
from decode_mem.infer import InferConfig, run_inference
from decode_mem.render import mean_frame


@pytest.mark.parametrize("limit", [7, 1000])  # within a block of the 200-frame stack, and all of it
def test_the_reports_widefield_is_summed_as_the_run_reads(shipped_model, tmp_path, monkeypatch, limit) -> None:
    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "cache" / "throughput.json"))
    monkeypatch.setattr(batch_report, "WIDEFIELD_FRAMES", limit)
    shown = []
    real_images = batch_report._images
    monkeypatch.setattr(batch_report, "_images", lambda *a: shown.append(real_images(*a)) or shown[-1])

    def read_again(*a, **k):
        raise AssertionError("the report read the stack again")

    monkeypatch.setattr("decode_mem.render.mean_frame", read_again)
    cfg = InferConfig(out=str(tmp_path / "out"), model=str(shipped_model), inputs=(str(SAMPLE),), formats=("csv",),
                      threads=1, device="cpu", batch_size=8, chunk_size="whole", write_probability_map=False)
    run_inference(cfg)
    assert (tmp_path / "out" / "report.html").is_file()
    (images,) = shown
    assert images.n_frames == min(limit, 200)
    np.testing.assert_array_equal(images.widefield, mean_frame(SAMPLE, max_frames=min(limit, 200)))
