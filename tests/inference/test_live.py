"""``infer --follow``: a writer process appends frames to a stack while the run localizes them.

Each kind of growing stack (TIFF, BigTIFF, OME-TIFF, Micro-Manager roll-over files, zarr, a folder of frame files, a
Micro-Manager NDTiff dataset) is written at a set rate with a pause longer than a block and one page (chunk, file)
written in two parts; the run must end by its idle timeout, the part files and ``<stem>.json`` read mid-run must be
valid, and the final files must equal those of an offline run on the finished movie. A SIGKILLed run resumed with
``--resume`` must give the same files too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import tifffile
from infer_helpers import REPO, WarningLines

from decode_mem.errors import ConfigError
from decode_mem.infer import InferConfig, run_inference
from decode_mem.infer.live_parts import live_dir
from decode_mem.io.localizations import read_localizations

WRITER = Path(__file__).with_name("live_writer.py")
FRAMES = 32
BLOCK = 4
RATE = 40.0  # frames/s
PAUSE_AT, PAUSE_S = 12, 1.0  # a pause of 40 frames' time: ten blocks
SPLIT_AT, SPLIT_S = 6, 0.4
IDLE = 2.5  # > the pause + scheduling delays of a loaded machine: the run must not end in the pause
ENGINE = {"block": BLOCK, "chunk_size": 32, "batch_size": 8, "amp": "off", "threads": 1, "compile": False,
          "device": "cpu", "formats": ("csv", "parquet", "picasso")}
TARGETS = {"tiff": "movie.tif", "bigtiff": "movie.tif", "ome": "movie.ome.tif", "mm": "movie.ome.tif",
           "zarr": "movie.zarr", "folder": "movie", "ndtiff": "movie_1"}


@pytest.fixture(scope="module")
def frames(sample_frames) -> np.ndarray:
    return np.ascontiguousarray(sample_frames[:FRAMES, 16:48, 16:48])


@pytest.fixture(scope="module")
def offline(frames, shipped_model, tmp_path_factory) -> Path:
    """The offline run on the finished movie, with the followed runs' engine settings."""
    root = tmp_path_factory.mktemp("offline")
    tifffile.imwrite(root / "movie.tif", frames)
    run_inference(InferConfig(inputs=(str(root / "movie.tif"),), out=str(root / "out"), model=str(shipped_model),
                              **ENGINE))
    return root / "out"


def start_writer(kind: str, frames: np.ndarray, root: Path, **kw: float) -> tuple[subprocess.Popen, Path]:
    np.save(root / "frames.npy", frames)
    target = root / TARGETS[kind]
    args = {"rate": RATE, "pause_at": PAUSE_AT, "pause_s": PAUSE_S, "split_at": SPLIT_AT, "split_s": SPLIT_S,
            "per_file": 10, "chunk": 4, **kw}
    cmd = [sys.executable, str(WRITER), kind, str(root / "frames.npy"), str(target)]
    cmd += [x for k, v in args.items() for x in (f"--{k}", str(v))]
    proc = subprocess.Popen(cmd)
    deadline = time.monotonic() + 20
    ready = target / "NDTiff.index" if kind == "ndtiff" else target  # a dataset is one once its index is there
    while not ready.exists():  # the run starts on an existing (perhaps still empty) stack
        assert proc.poll() is None or (proc.returncode == 0 and ready.exists()), "the writer failed to start"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return proc, target


class MidRunReader(threading.Thread):
    """Opens the part files and ``<stem>.json`` again and again while the run goes on; counts what it read."""

    def __init__(self, out: Path, stem: str) -> None:
        super().__init__(daemon=True)
        self.out, self.stem = out, stem
        self.stop = threading.Event()
        self.parts_read = 0
        self.running_json = 0
        self.running_report = 0
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            folder = live_dir(self.out, self.stem)
            for path in sorted(folder.glob("part-*")) if folder.is_dir() else []:
                if path.suffix not in (".csv", ".hdf5", ".parquet"):
                    continue  # the .yaml of a Picasso part, or a part still under its temporary name
                try:
                    read_localizations(path, pixel_size=100.0)
                    self.parts_read += 1
                except FileNotFoundError:
                    pass  # the run ended and removed the parts meanwhile
                except Exception as e:  # an invalid file
                    if path.exists():
                        self.errors.append(f"{path.name}: {type(e).__name__}: {e}")
            summary = self.out / f"{self.stem}.json"
            try:
                state = json.loads(summary.read_text())
                self.running_json += state.get("status") == "running"
            except FileNotFoundError:
                pass
            except Exception as e:
                self.errors.append(f"{summary.name}: {type(e).__name__}: {e}")
            try:
                html = (self.out / "report.html").read_text()
                self.running_report += "<td>running</td>" in html and html.rstrip().endswith("</html>")
            except FileNotFoundError:
                pass
            time.sleep(0.05)


def assert_same_files(out: Path, stem: str, offline: Path) -> None:
    """The followed run's final files hold the offline run's emitters (CSV byte for byte; Picasso, parquet)."""
    assert (out / f"{stem}.csv").read_text() == (offline / "movie.csv").read_text()
    with h5py.File(out / f"{stem}.hdf5") as a, h5py.File(offline / "movie.hdf5") as b:
        np.testing.assert_array_equal(a["locs"][...], b["locs"][...])
    live, ref = (read_localizations(p) for p in (out / f"{stem}.parquet", offline / "movie.parquet"))
    assert len(live) > 50
    for name in ref.names:
        np.testing.assert_array_equal(live[name], ref[name])
    assert json.loads((out / f"{stem}.json").read_text())["frames"] == FRAMES


@pytest.mark.parametrize("kind", list(TARGETS))
def test_follow_equals_offline_and_files_are_valid_mid_run(kind, frames, offline, shipped_model, tmp_path):
    if kind == "ndtiff":
        pytest.importorskip("ndtiff", reason="the 'formats' extra is not installed")
    proc, target = start_writer(kind, frames, tmp_path)
    out = tmp_path / "out"
    stem = target.name.split(".")[0]
    reader = MidRunReader(out, stem)
    reader.start()
    try:
        report = run_inference(InferConfig(inputs=(str(target),), out=str(out), model=str(shipped_model),
                                           follow=True, idle_timeout=IDLE, refresh=0.2, **ENGINE))
        ended = time.monotonic()
    finally:
        reader.stop.set()
        reader.join()
    assert proc.wait(timeout=30) == 0
    assert report.ok and report.stacks[0].frames == FRAMES
    assert_same_files(out, stem, offline)
    summary = json.loads((out / f"{stem}.json").read_text())
    assert summary["status"] == "done" and summary["live"]["ended_by"] == "idle"
    assert summary["live"]["frames_behind"] == 0
    assert not reader.errors, reader.errors
    # files were there to be read while it ran: parts, <stem>.json "running", a whole report.html saying so
    assert reader.parts_read > 0 and reader.running_json > 0 and reader.running_report > 0
    assert not live_dir(out, stem).exists() and "running" not in (out / "report.html").read_text()
    # the run ended by its idle timeout (not hanging on): the writer's last byte + IDLE + the last block, the
    # final files and the report (tests/io/test_follow.py times the idle timeout itself)
    last_write = max(p.stat().st_mtime for p in [target, *target.rglob("*")])
    assert ended - time.monotonic() + time.time() - last_write < IDLE + 10.0


def test_a_device_slower_than_the_camera_says_so_once_and_drops_nothing(sample_frames, shipped_model, tmp_path):
    many = np.concatenate([sample_frames[:100]] * 2)  # 64² frames: the camera's 400 frames/s outrun one CPU thread
    go = tmp_path / "go"
    proc, target = start_writer("tiff", many, tmp_path, rate=400.0, pause_at=-1, pause_s=0, split_at=-1, split_s=0,
                                hold_at=24, hold_file=go)
    out = tmp_path / "out"

    def start_camera() -> None:  # the timed camera phase starts once the run has started its parts
        while not (live_dir(out, "movie") / "parts.json").is_file():
            time.sleep(0.02)
        go.touch()

    threading.Thread(target=start_camera, daemon=True).start()
    obs = WarningLines()
    report = run_inference(InferConfig(inputs=(str(target),), out=str(out), model=str(shipped_model),
                                       follow=True, idle_timeout=1.0, refresh=0.2, **ENGINE), obs)
    assert proc.wait(timeout=30) == 0
    slow = [line for line in obs.lines if "frames/s" in line and "no frame is dropped" in line]
    assert len(slow) == 1, obs.lines
    assert report.stacks[0].frames == len(many)
    assert json.loads((out / "movie.json").read_text())["live"]["slower_than_camera"] is True


def test_sigkill_then_resume_gives_the_offline_result(frames, offline, shipped_model, tmp_path):
    # the camera pauses 16 frames in: the run is killed mid-acquisition, after its first part
    proc, target = start_writer("tiff", frames, tmp_path, rate=10.0, pause_at=16, pause_s=8.0)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "decode_mem.infer", str(target), "--out", str(out), "--model", str(shipped_model),
           "--follow", "--idle_timeout", "30", "--refresh", "0.2", "--block", str(BLOCK), "--chunk_size", "32",
           "--batch_size", "8", "--amp", "off", "--device", "cpu", "--threads", "1", "--compile", "off",
           "--engine", "torch",
           "--format", "csv,parquet,picasso",
           "--quiet"]
    run = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(REPO)})
    manifest = live_dir(out, "movie") / "parts.json"
    deadline = time.monotonic() + 60
    # after its first part and the status written beside it (a part is closed, then <stem>.json refreshed: a kill
    # between the two finds no status yet)
    while not (manifest.is_file() and json.loads(manifest.read_text())["stop"] >= BLOCK
               and (out / "movie.json").is_file()):
        assert run.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert json.loads((out / "movie.json").read_text())["status"] == "running"
    stop = json.loads(manifest.read_text())["stop"]
    assert 0 < stop < FRAMES
    size = target.stat().st_size
    while target.stat().st_size == size:  # resume once the camera writes again (its pause is longer than IDLE)
        assert proc.poll() is None
        time.sleep(0.02)
    report = run_inference(InferConfig(inputs=(str(target),), out=str(out), model=str(shipped_model), follow=True,
                                       resume=True, idle_timeout=IDLE, refresh=0.2, **ENGINE))
    assert proc.wait(timeout=30) == 0
    assert not report.stacks[0].skipped and report.stacks[0].frames == FRAMES
    assert_same_files(out, "movie", offline)
    again = run_inference(InferConfig(inputs=(str(target),), out=str(out), model=str(shipped_model), follow=True,
                                      resume=True, idle_timeout=IDLE, **ENGINE))
    assert again.stacks[0].skipped  # a finished stack is not redone


def test_follow_settings_are_checked():
    with pytest.raises(ConfigError, match="one stack"):
        InferConfig(inputs=("a.tif", "b.tif"), out="o", follow=True)
    with pytest.raises(ConfigError, match="probability map"):
        InferConfig(inputs=("a.tif",), out="o", follow=True, write_probability_map=True)
    with pytest.raises(ConfigError, match="idle_timeout"):
        InferConfig(inputs=("a.tif",), out="o", follow=True, idle_timeout=0)
