"""``python -m decode_mem.infer``: bad inputs, bad model, kill + resume."""

from __future__ import annotations

import filecmp
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
from infer_helpers import REPO, write_stacks

from decode_mem.infer import InferConfig, run_inference
from decode_mem.infer.__main__ import main
from decode_mem.model.choice import choose_model


def test_corrupt_stack_is_reported_and_skipped(shipped_model, sample_frames, tmp_path, capsys):
    write_stacks(tmp_path / "in", sample_frames, 2, 10)
    (tmp_path / "in" / "broken.tif").write_bytes(b"II*\0" + b"\xff" * 64)  # TIFF magic, garbage after
    rc = main([str(tmp_path / "in"), "--model", str(shipped_model), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "broken.tif" in err and "1 of 3 input(s) failed" in err
    assert sum("broken.tif" in line for line in err.splitlines()) == 1  # named once
    done = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert done == ["report.html", "s0.csv", "s0.json", "s1.csv", "s1.json"]  # the report lists the failure too
    report = (tmp_path / "out" / "report.html").read_text()
    assert "broken.tif" in report and "s0.npy" in report and "s1.tif" in report


def test_bad_model_is_an_error_before_any_work(sample_frames, tmp_path, capsys):
    write_stacks(tmp_path / "in", sample_frames, 1, 5)
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"not a checkpoint")
    rc = main([str(tmp_path / "in"), "--model", str(bad), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and "model.pt" in err
    assert not (tmp_path / "out").exists()
    rc = main([str(tmp_path / "in"), "--model", str(tmp_path / "missing.pt"), "--out", str(tmp_path / "out")])
    assert rc == 2 and "missing.pt: no such checkpoint file" in capsys.readouterr().err


def test_missing_input_and_default_model(shipped_model, sample_frames, tmp_path, capsys):
    write_stacks(tmp_path / "in", sample_frames, 1, 5)
    rc = main([str(tmp_path / "in" / "s0.npy"), str(tmp_path / "nothing*.tif"), "--out", str(tmp_path / "out"),
               "--format", "csv,picasso", "--threads", "1"])
    out, err = capsys.readouterr()
    assert rc == 1 and "no file matches" in err
    assert "shipped default model" in out and choose_model(None, "cpu").path.name in out
    assert (tmp_path / "out" / "s0.hdf5").is_file() and (tmp_path / "out" / "s0.yaml").is_file()


KILLABLE = """
import sys, time
from pathlib import Path
from decode_mem.infer import InferConfig, run_inference
from decode_mem.infer.observe import InferObserver

class StopAfterFirst(InferObserver):  # a deterministic kill point: after the first stack, wait to be killed
    def stack_finished(self, stem):
        Path(sys.argv[3]).write_text(stem)
        time.sleep(600)

run_inference(InferConfig(inputs=(sys.argv[1],), out=sys.argv[2], model=sys.argv[4], threads=1, chunk_size=512,
                          batch_size=4, device="cpu", formats=("csv", "picasso", "parquet")), StopAfterFirst())
"""


def test_kill_then_resume_gives_the_uninterrupted_result(shipped_model, sample_frames, tmp_path):
    write_stacks(tmp_path / "in", sample_frames, 4, 100)
    sizes = ["--chunk_size", "512", "--batch_size", "4", "--device", "cpu",  # the runs do the same arithmetic
             "--engine", "torch"]  # as run_inference's default (the command's is auto)
    args = ["--model", str(shipped_model), "--format", "csv,picasso,parquet", "--threads", "1", "--quiet", *sizes]
    ref = run_inference(InferConfig(inputs=(str(tmp_path / "in"),), out=str(tmp_path / "ref"), threads=1,
                                    model=str(shipped_model), formats=("csv", "picasso", "parquet"), chunk_size=512,
                                    batch_size=4, device="cpu"))
    assert ref.ok and len(ref.stacks) == 4
    out, marker = tmp_path / "out", tmp_path / "first_done"
    proc = subprocess.Popen([sys.executable, "-c", KILLABLE, str(tmp_path / "in"), str(out), str(marker),
                             str(shipped_model)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.exists(), proc.stderr.read().decode() if proc.poll() is not None else "no stack finished in time"
    os.kill(proc.pid, signal.SIGKILL)  # the child is asleep after its first stack: the kill lands in between
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    finished = {p.stem for p in out.glob("*.json")}
    assert finished == {"s0"}, finished
    for path in out.iterdir():  # whatever carries a final name is complete
        if not path.name.endswith(".partial"):
            assert path.suffix in (".json", ".html") or _same(path, tmp_path / "ref" / path.name), path.name

    first = (out / "s0.json").read_text()
    cmd = [sys.executable, "-m", "decode_mem.infer", str(tmp_path / "in"), "--out", str(out), *args]
    rc = subprocess.run([*cmd, "--resume"], cwd=REPO, capture_output=True).returncode
    assert rc == 0
    assert (out / "s0.json").read_text() == first  # finished stacks are skipped, not redone
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(p.name for p in (tmp_path / "ref").iterdir())  # no .partial left
    for name in names:
        if not name.endswith((".json", ".html")):  # summaries and the report hold timings
            assert _same(out / name, tmp_path / "ref" / name), name


def _same(a, b) -> bool:
    if a.suffix == ".hdf5":
        with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
            return np.array_equal(fa["locs"][...], fb["locs"][...])
    return filecmp.cmp(a, b, shallow=False)
