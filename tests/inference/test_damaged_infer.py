"""``python -m decode_mem.infer`` on damaged and page-by-page inputs: every complete frame localized, the repairs
named in one warning and in ``<stem>.json`` ("damage"), no NaN in any output. One run over a folder of three
stacks (one process start)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
from infer_helpers import REPO

from decode_mem.io.localizations import read_localizations

ENGINE = ["--block", "4", "--chunk_size", "32", "--batch_size", "8", "--amp", "off", "--threads", "1",
          "--compile", "off", "--device", "cpu", "--quiet"]


@pytest.fixture(scope="module")
def run(sample_frames, shipped_model, tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    frames = np.ascontiguousarray(sample_frames[:12, 16:48, 16:48])
    root = tmp_path_factory.mktemp("damaged")
    inputs = root / "in"
    inputs.mkdir()
    movie = frames.astype(np.float32)
    movie[3] = np.nan  # one frame all NaN
    flat = movie[7].ravel()
    flat[np.random.default_rng(0).choice(flat.size, 50, replace=False)] = np.nan  # 50 NaN pixels
    movie[9, 5, :3] = [np.inf, -np.inf, np.inf]
    tifffile.imwrite(inputs / "nan.tif", movie)
    for name in ("cut.tif", "pages.tif"):
        for f in frames:
            tifffile.imwrite(inputs / name, f, append=True)  # a camera writing page by page
    with open(inputs / "cut.tif", "r+b") as fh:
        fh.truncate((inputs / "cut.tif").stat().st_size - 700)  # inside the last frame's pixels
    cmd = [sys.executable, "-m", "decode_mem.infer", str(inputs), "--out", str(root / "out"), "--model",
           str(shipped_model), "--format", "csv,parquet", "--max_damage", "0.3", *ENGINE]  # nan.tif: 3 of 12
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc, root / "out"


def test_nan_frames_and_pixels_are_repaired_named_and_kept_out_of_the_outputs(run):
    proc, out = run
    warnings = [line for line in proc.stderr.splitlines() if "nan.tif: 3 damaged frame" in line]
    assert len(warnings) == 1 and "frame 3: 1024 of 1024 pixels NaN" in warnings[0]
    summary = json.loads((out / "nan.json").read_text())
    assert summary["damage"]["frames"] == [3, 7, 9]
    assert summary["damage"]["count"] == 3
    assert "50 of 1024 pixels" in summary["damage"]["records"][1]["what"]
    assert summary["shape"] == [12, 32, 32]  # no frame dropped, none renumbered
    text = (out / "nan.csv").read_text().lower()
    assert "nan" not in text and "inf" not in text
    table = read_localizations(out / "nan.parquet")
    assert len(table) > 0
    for column in table.columns.values():
        if np.asarray(column).dtype.kind == "f":
            assert np.isfinite(column).all()
    assert 3 not in set(table["frame"].tolist())  # the flat frame yields no localization


def test_a_tiff_cut_by_a_crash_localizes_its_complete_frames(run):
    proc, out = run
    assert "cut.tif: 1 damaged frame record(s): frame 11" in proc.stderr
    assert "the stack ends with frame 10, the last complete one" in proc.stderr
    summary = json.loads((out / "cut.json").read_text())
    assert summary["shape"] == [11, 32, 32]
    assert summary["damage"]["frames"] == [11]
    assert int(read_localizations(out / "cut.parquet")["frame"].max()) == 10


def test_a_tiff_grown_page_by_page_is_localized_whole(run):
    """Offline infer used to read 1 frame of such a file, exit 0, no warning."""
    proc, out = run
    summary = json.loads((out / "pages.json").read_text())
    assert summary["shape"] == [12, 32, 32] and "damage" not in summary
    assert "pages.tif" not in proc.stderr
    assert int(read_localizations(out / "pages.parquet")["frame"].max()) >= 10
