"""Resume inside a stack: a run stopped (Cancel, Ctrl-C, SIGTERM) or killed (SIGKILL) midway keeps the blocks its
journal (``<stem>.progress/``) recorded; ``--resume`` continues after them, and every output equals that of one
uninterrupted run. A resume with settings that change results is refused; a resumed finished batch keeps its report.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest
import zarr
from infer_helpers import SAMPLE

from decode_mem.errors import ConfigError, StackError, Stopped
from decode_mem.infer import InferConfig, run_inference
from decode_mem.infer.observe import InferObserver

FORMATS = ("csv", "picasso", "parquet")
BLOCK = 16  # frames per block: the sample's 200 frames are 13 blocks


class StopAfter(InferObserver):
    """A Cancel button pressed after ``blocks`` blocks (polled by the runner after each block)."""

    def __init__(self, blocks: int) -> None:
        self.blocks, self.seen = blocks, 0

    def block_done(self, stem, frames, result) -> None:
        self.seen += 1

    def stop_requested(self) -> bool:
        return self.seen >= self.blocks


def config(out: Path, model: Path, **kw) -> InferConfig:
    kw = {"write_probability_map": True, "inputs": (str(SAMPLE),), **kw}
    return InferConfig(out=str(out), model=str(model), formats=FORMATS, block=BLOCK,
                       batch_size=8, chunk_size="whole", journal_seconds=0.0, threads=1, device="cpu",
                       **kw)


def outputs(out: Path) -> dict[str, object]:
    """Every output's values: the CSV's text, the Picasso table, the parquet table, the probability map."""
    with h5py.File(out / "stack.hdf5", "r") as f:
        locs = f["locs"][...]
    return {"csv": (out / "stack.csv").read_text(), "picasso": locs,
            "parquet": pq.read_table(out / "stack.parquet").to_pydict(),
            "prob": zarr.open_array(str(out / "stack_prob.zarr"), mode="r")[...]
            if (out / "stack_prob.zarr").exists() else None}


def assert_same_outputs(a: dict[str, object], b: dict[str, object]) -> None:
    assert a["csv"] == b["csv"]
    np.testing.assert_array_equal(a["picasso"], b["picasso"])
    assert a["parquet"] == b["parquet"]
    if a["prob"] is not None or b["prob"] is not None:
        np.testing.assert_array_equal(a["prob"], b["prob"])


@pytest.fixture(scope="module")
def uninterrupted(shipped_model, tmp_path_factory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("whole")
    run_inference(config(out, shipped_model))
    assert not (out / "stack.progress").exists()  # the journal goes once <stem>.json is written
    return outputs(out)


@pytest.mark.parametrize("blocks", [1, 7])
def test_a_stopped_run_resumes_to_the_uninterrupted_result(shipped_model, uninterrupted, tmp_path, blocks):
    with pytest.raises(Stopped) as stop:
        run_inference(config(tmp_path, shipped_model), StopAfter(blocks))
    assert stop.value.frame == blocks * BLOCK and stop.value.frames == 200
    assert f"stopped at frame {blocks * BLOCK} of 200" in str(stop.value) and "--resume" in str(stop.value)
    assert not (tmp_path / "stack.json").exists() and not (tmp_path / "stack.csv").exists()
    manifest = json.loads((tmp_path / "stack.progress" / "parts.json").read_text())
    assert manifest["parts"][-1]["stop"] == blocks * BLOCK
    # the CSV stays under its temporary name, whole up to the stop's checkpoint: the resume continues it
    cut = manifest["parts"][-1]["outputs"]["stack.csv"]
    assert (tmp_path / "stack.csv.partial").stat().st_size == cut["bytes"] > 0
    report = run_inference(config(tmp_path, shipped_model, resume=True))
    assert report.ok and report.stacks[0].localizations == len(uninterrupted["picasso"])
    summary = json.loads((tmp_path / "stack.json").read_text())
    assert summary["resumed_at_frame"] == blocks * BLOCK
    assert summary["resume_files"] == {"continued": ["stack.csv"], "replayed": ["stack.hdf5", "stack.parquet"]}
    assert_same_outputs(outputs(tmp_path), uninterrupted)
    assert not (tmp_path / "stack.progress").exists()


def test_a_signal_just_after_the_journal_began_says_where_to_resume(shipped_model, uninterrupted, tmp_path,
                                                                    monkeypatch):
    """SIGTERM between the journal's start and the first block (CI once caught it there: a bare "interrupted")."""
    from decode_mem.errors import Interrupted
    from decode_mem.infer.outputs import StackOutputs

    begin = StackOutputs.begin

    def begin_then_signal(self, resume, meta):
        begin(self, resume, meta)
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(StackOutputs, "begin", begin_then_signal)
    with pytest.raises(Stopped) as stop:
        run_inference(config(tmp_path, shipped_model))
    assert stop.value.signum == signal.SIGTERM and stop.value.frame == 0
    assert "stopped at frame 0 of 200" in str(stop.value) and "--resume" in str(stop.value)
    monkeypatch.undo()
    run_inference(config(tmp_path, shipped_model, resume=True))
    assert_same_outputs(outputs(tmp_path), uninterrupted)


def test_without_resume_a_journal_is_started_again(shipped_model, uninterrupted, tmp_path):
    with pytest.raises(Stopped):
        run_inference(config(tmp_path, shipped_model), StopAfter(3))
    assert (tmp_path / "stack.csv.partial").exists()
    run_inference(config(tmp_path, shipped_model))  # no --resume: from frame 0, the journal dropped
    assert_same_outputs(outputs(tmp_path), uninterrupted)
    assert not list(tmp_path.glob("*.partial"))  # the stopped run's CSV was not continued, nor left behind


def test_a_resume_with_settings_that_change_results_is_refused_naming_them(shipped_model, tmp_path):
    with pytest.raises(Stopped):
        run_inference(config(tmp_path, shipped_model), StopAfter(2))
    with pytest.raises(ConfigError, match=r"threshold: null then, 0\.6 now"):
        run_inference(config(tmp_path, shipped_model, resume=True, threshold=0.6))
    assert (tmp_path / "stack.progress" / "parts.json").is_file()  # refused before any work: the journal stays


def test_a_resumed_run_takes_the_first_runs_domain_check_from_its_journal(shipped_model, tmp_path, monkeypatch):
    """The same frames are not checked twice (the check costs seconds at the start of every resume)."""
    import decode_mem.infer.runner as runner

    with pytest.raises(Stopped):
        run_inference(config(tmp_path, shipped_model), StopAfter(2))
    recorded = json.loads((tmp_path / "stack.progress" / "parts.json").read_text())["meta"]["domain"]
    assert recorded["numbers"]["frames"] > 0

    def checked_again(*args, **kwargs):
        raise AssertionError("the domain was checked again")

    monkeypatch.setattr(runner, "check_domain", checked_again)
    run_inference(config(tmp_path, shipped_model, resume=True))
    assert json.loads((tmp_path / "stack.json").read_text())["domain"] == recorded["numbers"]
    # a stack without a journal is checked (where this machine remembers no check of it: domain_cache)
    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "fresh_cache" / "throughput.json"))
    with pytest.raises(StackError, match="checked again"):
        run_inference(config(tmp_path / "again", shipped_model, resume=True))


def test_frames_repaired_before_the_resume_point_stay_in_the_record(shipped_model, tmp_path):
    """A resumed run does not read the frames before its start: their repairs come from the journal, so
    ``<stem>.json`` 'damage' is that of one uninterrupted run."""
    import tifffile

    movie = tifffile.imread(SAMPLE).astype(np.float32)
    movie[3] = np.nan  # before the resume point (frame 32)
    movie[5, :4, :4] = np.inf
    movie[120, 10, 10] = np.nan  # after it
    path = tmp_path / "nan.tif"
    tifffile.imwrite(path, movie)
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    run_inference(config(whole, shipped_model, inputs=(str(path),), write_probability_map=False))
    expected = json.loads((whole / "nan.json").read_text())["damage"]
    assert expected["frames"] == [3, 5, 120]
    with pytest.raises(Stopped) as stop:
        run_inference(config(stopped, shipped_model, inputs=(str(path),), write_probability_map=False),
                      StopAfter(2))
    assert stop.value.frame == 2 * BLOCK
    run_inference(config(stopped, shipped_model, inputs=(str(path),), write_probability_map=False, resume=True))
    summary = json.loads((stopped / "nan.json").read_text())
    assert summary["resumed_at_frame"] == 2 * BLOCK
    assert summary["damage"] == expected
    assert (stopped / "nan.csv").read_text() == (whole / "nan.csv").read_text()


def test_a_resumed_finished_batch_keeps_its_report(shipped_model, tmp_path):
    run_inference(config(tmp_path, shipped_model))
    first = (tmp_path / "report.html").read_text()
    report = run_inference(config(tmp_path, shipped_model, resume=True))
    assert report.stacks[0].skipped and report.stacks[0].frames == 200 and report.stacks[0].localizations > 0
    again = (tmp_path / "report.html").read_text()
    assert "1 done before (--resume)" in again and "200 before" in again
    # the super-resolution image is there again, counted from the file the first run wrote
    assert again.count("<img") == first.count("<img") > 0


def infer_command(out: Path, model: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "decode_mem.infer", str(SAMPLE), "--out", str(out), "--model", str(model),
            "--format", ",".join(FORMATS), "--block", str(BLOCK), "--batch_size", "8", "--whole_frames",
            "--prob_map", "--journal_seconds", "0", "--threads", "1", "--device", "cpu", "--engine", "torch", "--quiet",
            *extra]  # torch: as run_inference's default, the uninterrupted run's (the command's is auto)


def parts_done(out: Path) -> int:
    try:
        return len(json.loads((out / "stack.progress" / "parts.json").read_text())["parts"])
    except (OSError, ValueError, KeyError):
        return 0


def run_until(out: Path, model: Path, parts: int, sig: int, timeout: float = 120.0) -> subprocess.Popen:
    """Start ``infer``, send ``sig`` once its journal holds ``parts`` parts; returns the finished process."""
    proc = subprocess.Popen(infer_command(out, model), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while parts_done(out) < parts and proc.poll() is None and time.monotonic() - t0 < timeout:
        time.sleep(0.02)
    assert proc.poll() is None, f"infer ended before {parts} parts: {proc.communicate()}"
    proc.send_signal(sig)
    return proc


@pytest.mark.parametrize("parts", [9])
def test_sigkill_at_a_block_then_resume_equals_an_uninterrupted_run(shipped_model, uninterrupted, tmp_path, parts):
    proc = run_until(tmp_path, shipped_model, parts, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "stack.json").exists()
    kept = json.loads((tmp_path / "stack.progress" / "parts.json").read_text())["parts"][-1]["stop"]
    assert 0 < kept < 200
    cut = json.loads((tmp_path / "stack.progress" / "parts.json").read_text())["parts"][-1]["outputs"]["stack.csv"]
    assert (tmp_path / "stack.csv.partial").stat().st_size >= cut["bytes"] > 0  # synced before parts.json said so
    done = subprocess.run(infer_command(tmp_path, shipped_model, "--resume"), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert_same_outputs(outputs(tmp_path), uninterrupted)
    # the CSV went on from the killed run's file, cut back to its last part; HDF5 and parquet were rebuilt
    assert json.loads((tmp_path / "stack.json").read_text())["resume_files"] == {
        "continued": ["stack.csv"], "replayed": ["stack.hdf5", "stack.parquet"]}


@pytest.mark.serial  # its stop is timed: no other worker's test beside it
def test_sigterm_stops_within_seconds_keeps_the_blocks_and_says_how_to_continue(shipped_model, uninterrupted,
                                                                                tmp_path):
    proc = run_until(tmp_path, shipped_model, 3, signal.SIGTERM)
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 5.0, err
    assert proc.returncode == 143, err
    line = [x for x in err.splitlines() if "stopped" in x]
    assert len(line) == 1 and "--resume" in line[0] and "of 200" in line[0], err
    frame = int(line[0].split("stopped at frame ")[1].split()[0])
    assert frame >= 3 * BLOCK and frame % BLOCK == 0
    assert json.loads((tmp_path / "stack.progress" / "parts.json").read_text())["parts"][-1]["stop"] == frame
    # no half-written localization file: the CSV's temporary file is whole up to the journal's last part (a resume
    # continues it), the others are rebuilt from the journal; the probability map's partial store stays, its
    # resumed run writes the frames it lacks
    assert sorted(p.name for p in tmp_path.glob("*.partial")) == ["stack.csv.partial", "stack_prob.zarr.partial"]
    done = subprocess.run(infer_command(tmp_path, shipped_model, "--resume"), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert_same_outputs(outputs(tmp_path), uninterrupted)


def test_a_killed_dask_run_resumes_to_the_uninterrupted_result(shipped_model, uninterrupted, tmp_path):
    """Two dask workers: the client writes the journal as the ranges come back in frame order."""
    cfg = dict(workers=2, frames_per_task=BLOCK, write_probability_map=False)
    with pytest.raises(Stopped):
        run_inference(config(tmp_path, shipped_model, **cfg), StopAfter(5))
    assert 0 < json.loads((tmp_path / "stack.progress" / "parts.json").read_text())["parts"][-1]["stop"] < 200
    run_inference(config(tmp_path, shipped_model, resume=True, **cfg))
    assert_same_outputs(outputs(tmp_path), {**uninterrupted, "prob": None})



def test_a_rerun_refused_for_its_sizes_keeps_the_finished_stack(shipped_model, tmp_path):
    run_inference(config(tmp_path, shipped_model, write_probability_map=False))
    before = {p.name: p.read_bytes() for p in tmp_path.glob("stack.*")}
    assert "stack.json" in before
    with pytest.raises(ConfigError):  # sizes that cannot fit the memory limit: refused when the stack starts
        run_inference(InferConfig(inputs=(str(SAMPLE),), out=str(tmp_path), model=str(shipped_model),
                                  formats=FORMATS, chunk_size=64, batch_size=100_000, memory_limit=64 * 2**20))
    assert {p.name: p.read_bytes() for p in tmp_path.glob("stack.*")} == before


def test_a_journal_part_is_on_disk_before_parts_json_names_it(tmp_path, monkeypatch):
    """A closed part survives a power cut, not only a kill: its files, then parts.json and the folder's renames,
    are fsynced, in that order."""
    import os

    from decode_mem.infer.live_parts import LiveParts
    from decode_mem.io.table import EmitterTable

    synced: list[str] = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    parts = LiveParts(tmp_path, "stack", (), block=4, common={"pixel_size": 100.0, "width": 8, "height": 8,
                                                               "frames": 8, "extras": (), "three_d": False},
                      picasso={}, folder=tmp_path / "stack.progress")
    parts.begin(False, {})
    synced.clear()
    ones = np.ones(2, np.float32)
    parts.write(EmitterTable({"frame": np.array([0, 1]), "x": ones, "y": ones, "z": 0 * ones, "photons": 900 * ones,
                              "bg": 10 * ones}))
    parts.close_part(4)
    names = [Path(p).name for p in synced]
    assert names[0] == "part-00000.parquet" and names[1:] == ["parts.json.partial", "stack.progress"]


def test_journal_seconds_with_follow_is_refused_in_one_line(tmp_path, capsys):
    """A followed stack's parts are closed every --refresh seconds: --journal_seconds there would do nothing, so
    it is refused (exit 2, one line naming --refresh) before anything is read or written."""
    from decode_mem.infer.__main__ import main

    code = main([str(SAMPLE), "--out", str(tmp_path / "o"), "--follow", "--journal_seconds", "1", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--refresh" in err[0], err
    assert not (tmp_path / "o").exists()
