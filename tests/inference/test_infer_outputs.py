"""Batch inference outputs: ThunderSTORM CSV against ground truth, Picasso schema, JSON summary, frame ranges."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest
import yaml
from infer_helpers import GT, SAMPLE, write_stacks

from decode_mem.evaluate import evaluate, match_emitters
from decode_mem.footprint.request import SizeRequest
from decode_mem.infer import FrameRange, InferConfig, run_inference, split_frames
from decode_mem.infer.predict import predict_stack
from decode_mem.infer.work import EngineSettings, predict_range
from decode_mem.io.camera import Camera
from decode_mem.io.localizations import read_localizations
from decode_mem.io.stack import open_stack
from decode_mem.io.table import EmitterTable
from decode_mem.model.checkpoint import load_model


@pytest.fixture(scope="module")
def sample_run(shipped_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("sample_out")
    report = run_inference(InferConfig(inputs=(str(SAMPLE),), out=str(out), model=str(shipped_model),
                                       formats=("csv", "picasso", "parquet")))
    return out, report


def test_csv_follows_the_ground_truth_conventions(sample_run, shipped_model):
    out, report = sample_run
    assert report.ok and len(report.stacks) == 1
    pred = read_localizations(out / "stack.csv", pixel_size=100.0)
    gt = read_localizations(GT, pixel_size=100.0)
    metrics = evaluate(pred, gt, pixel_size=100.0)
    assert metrics.jaccard > 0.7
    assert metrics.rmse_lat < 50.0  # nm; a frame off by one or a half-pixel shift would break this
    m = match_emitters(pred, gt, pixel_size=100.0)
    assert abs(np.mean(m.dx)) < 10 and abs(np.mean(m.dy)) < 10  # no corner/centre offset (50 nm)
    # the CSV holds exactly the engine's emitters: 1-based frames, nm from the outer corner
    with open_stack(SAMPLE) as stack:
        # the run's precision, InferConfig's default 'auto' (bf16 on a CPU with native bf16, else fp32)
        direct = EmitterTable.concat(predict_stack(stack, load_model(shipped_model), amp="auto"))
    # a 2-D model: no z column (an all-zero z makes locan read 3-D data); photons not quantized by bf16
    header = (out / "stack.csv").read_text().split("\n", 1)[0]
    assert '"z [nm]"' not in header and '"sigma_intensity [photon]"' in header
    assert len(np.unique(pred["photons"])) > 0.95 * len(pred)
    raw = np.loadtxt(out / "stack.csv", delimiter=",", skiprows=1)
    assert len(raw) == len(direct) == report.stacks[0].localizations
    np.testing.assert_array_equal(raw[:, 1], direct["frame"] + 1)
    np.testing.assert_allclose(raw[:, 2], (direct["x"] + 0.5) * 100.0, rtol=1e-5)
    np.testing.assert_allclose(raw[:, 3], (direct["y"] + 0.5) * 100.0, rtol=1e-5)


def test_picasso_hdf5_and_yaml_follow_picassos_schema(sample_run):
    out, report = sample_run
    with h5py.File(out / "stack.hdf5", "r") as f:
        locs = f["locs"][...]
    names = locs.dtype.names
    assert names[:9] == ("frame", "x", "y", "photons", "sx", "sy", "bg", "lpx", "lpy")
    assert locs.dtype["frame"] == np.dtype("<u4") and locs.dtype["x"] == np.dtype("<f4")
    assert len(locs) == report.stacks[0].localizations
    assert locs["frame"].min() == 0 and locs["frame"].max() <= 199  # 0-based
    assert np.isfinite(np.stack([locs[n] for n in names])).all()  # Picasso drops rows with NaN
    docs = list(yaml.safe_load_all((out / "stack.yaml").read_text()))
    assert docs[0]["Width"] == 64 and docs[0]["Height"] == 64 and docs[0]["Frames"] == 200
    assert any(d.get("Pixelsize") == 100.0 for d in docs)
    csv = read_localizations(out / "stack.csv", pixel_size=100.0)
    np.testing.assert_allclose(np.sort(locs["x"]), np.sort(csv["x"]), atol=1e-3)


def test_picasso_itself_reads_the_file(sample_run):
    """Picasso's own reader takes the file (picasso is optional: the 'bench' extra; skipped, and said, without)."""
    picasso_io = pytest.importorskip("picasso.io", reason="picasso is not installed (pip install picassosr)")
    out, _ = sample_run
    with h5py.File(out / "stack.hdf5", "r") as f:
        locs = f["locs"][...]
    loaded, info = picasso_io.load_locs(str(out / "stack.hdf5"))
    assert len(loaded) == np.sum((locs["x"] >= 0) & (locs["y"] >= 0)) and info[0]["Frames"] == 200


def test_json_summary_and_parquet(sample_run):
    out, report = sample_run
    summary = json.loads((out / "stack.json").read_text())
    assert summary["frames"] == 200 and summary["localizations"] == report.stacks[0].localizations
    assert summary["frames_per_s"] > 0 and summary["peak_rss_anon_mb"] > 0
    # the process's CPU seconds over the loop: every thread's, at most every core's for the whole span
    assert 0 < summary["cpu_s"] <= (os.cpu_count() or 1) * summary["wall_s"] + 0.1
    assert summary["model"].endswith("default_2d.pt") and summary["settings"]["chunk_size"] == "auto"
    # 'auto' sizes: what was chosen, under which budget and why, with the planner's prediction
    sizes = summary["sizes"]
    assert isinstance(sizes["chunk_size"], int) and isinstance(sizes["batch_size"], int)
    assert sizes["budget"].startswith("default host budget") and sizes["reason"]
    assert sizes["plan"]["predicted_host_mib"] <= sizes["budget_mib"]
    assert summary["peak_rss_anon_mb"] <= 1.1 * sizes["budget_mib"]  # the run stayed within the budget
    assert summary["outputs"] == ["stack.csv", "stack.hdf5", "stack.yaml", "stack.parquet", "stack.json"]
    import pyarrow.parquet as pa_pq

    assert "z [nm]" not in pa_pq.read_schema(out / "stack.parquet").names
    pq = read_localizations(out / "stack.parquet")
    csv = read_localizations(out / "stack.csv", pixel_size=100.0)
    np.testing.assert_array_equal(pq["frame"], csv["frame"])
    assert not list(out.glob("*.partial"))


def test_frame_ranges_give_the_whole_stack_result(shipped_model, sample_frames):
    frames = sample_frames[:70]
    settings = EngineSettings(model=str(shipped_model), camera=Camera.emccd(), sizes=SizeRequest(block=16))
    whole = EmitterTable.concat(predict_stack(frames, load_model(shipped_model), chunk_size=settings.sizes.chunk_size,
                                              batch_size=settings.sizes.batch_size, block=16, amp=settings.sizes.amp))
    ranges = split_frames(70, 20, 16)
    assert ranges == [(0, 32), (32, 64), (64, 70)]  # boundaries on multiples of the block
    parts = EmitterTable.concat(predict_range(frames, a, b, settings).table for a, b in ranges)
    assert len(whole) > 100
    for name in whole.names:
        np.testing.assert_array_equal(parts[name], whole[name], err_msg=name)
    # context at the range ends comes from the real neighbours, edge repetition only at the stack ends
    (t0, block), = list(FrameRange(frames, 32, 40).blocks(16))
    assert t0 == 0 and np.array_equal(block, frames[31:41])
    (_, first), = list(FrameRange(frames, 0, 3).blocks(16))
    assert np.array_equal(first, frames[[0, 0, 1, 2, 3]])
    (_, last), = list(FrameRange(frames, 66, 70).blocks(16))
    assert np.array_equal(last, frames[[65, 66, 67, 68, 69, 69]])


def test_folder_glob_and_tiny_model(tiny_model, sample_frames, tmp_path):
    write_stacks(tmp_path / "in", sample_frames, 2, 12)
    report = run_inference(InferConfig(inputs=(str(tmp_path / "in" / "*.npy"), str(tmp_path / "in")),
                                       out=str(tmp_path / "out"), model=str(tiny_model), formats=("parquet",),
                                       threshold=0.0))
    assert report.ok and [s.stem for s in report.stacks] == ["s0", "s1"]  # s0.npy named twice, done once
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.html", "s0.json", "s0.parquet",
                                                                           "s1.json", "s1.parquet"]
    assert json.loads((tmp_path / "out" / "s1.json").read_text())["settings"]["threshold"] == 0.0
