"""``infer --follow`` before and between frames: it waits for a file the camera has not created yet, says how long
until the idle timeout ends the run, leaves the waits out of its rates, says in ``<stem>.json`` how it ended, and
does not list a folder of frame files at every poll."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import tifffile

from decode_mem.errors import StackError
from decode_mem.infer import InferConfig, run_inference
from decode_mem.infer.live_status import LiveStatus
from decode_mem.infer.observe import InferObserver
from decode_mem.io.follow import FollowedStack, wait_for_path
from decode_mem.io.growing_folder import FrameFolder, next_name

ENGINE = {"block": 4, "chunk_size": 32, "batch_size": 8, "amp": "off", "threads": 1, "compile": False,
          "device": "cpu", "formats": ("csv",)}


class FakeClock:
    def __init__(self, events: dict[float, callable] | None = None) -> None:
        self.now, self.events = 0.0, dict(events or {})

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now = round(self.now + s, 6)
        for at in [t for t in self.events if t <= self.now]:
            self.events.pop(at)()


def test_wait_for_path_waits_for_the_file_and_says_how_long_is_left(tmp_path):
    path = tmp_path / "movie.tif"
    clock = FakeClock({2.0: lambda: path.write_bytes(b"II*\0")})
    said: list[float] = []
    waited = wait_for_path(path, 5.0, on_wait=said.append, poll_s=0.1, clock=clock, sleep=clock.sleep)
    assert waited == pytest.approx(2.0)
    assert said[0] == pytest.approx(5.0) and said == sorted(said, reverse=True) and len(said) in (2, 3)


def test_wait_for_path_gives_up_after_the_idle_timeout(tmp_path):
    clock = FakeClock()
    with pytest.raises(StackError, match=r"nothing\.tif: no such file .*waited --idle_timeout 3 s"):
        wait_for_path(tmp_path / "nothing.tif", 3.0, poll_s=0.1, clock=clock, sleep=clock.sleep)
    assert clock.now == pytest.approx(3.0, abs=0.5)


def test_a_followed_stack_counts_down_while_it_waits_and_times_the_wait(tmp_path):
    folder = tmp_path / "frames"
    folder.mkdir()
    frame = np.full((8, 8), 100, np.uint16)
    for t in range(2):
        tifffile.imwrite(folder / f"f{t}.tif", frame)
    clock = FakeClock({3.0: lambda: tifffile.imwrite(folder / "f2.tif", frame)})
    said: list[float | None] = []
    followed = FollowedStack(FrameFolder(folder), idle_timeout=10.0, poll_s=0.5, clock=clock, sleep=clock.sleep,
                             on_wait=said.append)
    assert followed.wait_for(2) == 2  # f2 appears at 3 s and completes f1
    assert said[-1] is None and said[0] == pytest.approx(10.0) and 7.0 <= min(s for s in said if s) <= 8.0
    assert followed.waited_s == pytest.approx(3.0)
    said.clear()
    assert followed.wait_for(10) == 3  # the end: 10 s without a new byte
    assert followed.ended_by == "idle" and followed.waited_s == pytest.approx(13.0)
    assert said[-1] is None and 0.0 <= min(s for s in said if s is not None) <= 1.0


def test_the_camera_rate_at_the_end_leaves_out_the_idle_timeout(tmp_path):
    """The last frame counts as seen when the writer stopped, not when the idle timeout ended the run."""
    frame = np.full((8, 8), 100, np.uint16)

    def write(t: int):
        return lambda: tifffile.imwrite(tmp_path / f"f{t}.tif", frame)

    clock = FakeClock({0.5 * t: write(t) for t in range(1, 9)})  # 2 frames/s for 4 s, then nothing
    write(0)()
    followed = FollowedStack(FrameFolder(tmp_path), idle_timeout=6.0, poll_s=0.25, clock=clock, sleep=clock.sleep)
    assert followed.wait_for(100) == 9 and followed.ended_by == "idle"
    assert clock.now >= 10.0
    assert followed.camera_rate() == pytest.approx(2.0, rel=0.15)  # 9 frames over 4 s, not over 10 s


@pytest.mark.serial  # wall time measured: no other worker beside it
def test_the_rate_is_over_the_frames_own_time_not_the_wait():
    status = LiveStatus((8, 8), 100.0, 4)
    t0 = time.monotonic()
    status.frames_done = 8
    status.sample(8, 0.0, waited_s=0.0)
    time.sleep(0.2)
    status.frames_done = 16
    status.sample(16, 0.0, waited_s=0.0)
    busy = time.monotonic() - t0
    time.sleep(0.3)  # waiting for frames: 0.3 s that the rate must not count
    status.frames_done = 20
    status.sample(20, 0.0, waited_s=0.3)
    rate = status.done_rate()
    assert rate == pytest.approx(12 / (time.monotonic() - t0 - 0.3), rel=0.05)
    assert rate > 12 / (busy + 0.3 + 0.05)  # with the wait counted it would be at most this


def write_later(path, frames: np.ndarray, after_s: float) -> threading.Thread:
    def go() -> None:
        time.sleep(after_s)
        tmp = path.with_name("tmp-" + path.name)
        for f in frames:
            tifffile.imwrite(tmp, f, append=True)
        tmp.rename(path)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


class Lines(InferObserver):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, line: str) -> None:
        self.lines.append(line)

    warning = message


def test_follow_started_before_the_camera_waits_for_the_file(sample_frames, shipped_model, tmp_path):
    frames = np.ascontiguousarray(sample_frames[:8, 16:48, 16:48])
    path = tmp_path / "movie.tif"
    writer = write_later(path, frames, after_s=1.0)
    obs = Lines()
    report = run_inference(InferConfig(inputs=(str(path),), out=str(tmp_path / "out"), model=str(shipped_model),
                                       follow=True, idle_timeout=1.5, refresh=0.2, **ENGINE), obs)
    writer.join()
    assert report.frames == 8
    assert any("waiting for" in line and "movie.tif" in line for line in obs.lines)
    summary = json.loads((tmp_path / "out" / "movie.json").read_text())
    assert summary["status"] == "done" and summary["ended"] == "idle timeout"


class StopAfter(InferObserver):
    """Ctrl-C after the second block."""

    def __init__(self) -> None:
        self.blocks, self.raised_at = 0, None

    def block_done(self, stem, frames, result) -> None:
        self.blocks += 1
        if self.blocks == 2:
            self.raised_at = time.monotonic()
            raise KeyboardInterrupt


def test_a_stopped_follow_says_stopped_not_running(sample_frames, shipped_model, tmp_path):
    frames = np.ascontiguousarray(sample_frames[:16, 16:48, 16:48])
    path = tmp_path / "movie.tif"
    for f in frames:
        tifffile.imwrite(path, f, append=True)
    obs = StopAfter()
    with pytest.raises(BaseException) as stop:  # KeyboardInterrupt, or the run's Stopped
        run_inference(InferConfig(inputs=(str(path),), out=str(tmp_path / "out"), model=str(shipped_model),
                                  follow=True, idle_timeout=30, refresh=0.05, **ENGINE), obs)
    # at once, not after --idle_timeout: the read-ahead thread waiting for frames 9-13 is woken (it held the stop
    # for the whole 30 s before)
    assert time.monotonic() - obs.raised_at < 10
    assert isinstance(stop.value, KeyboardInterrupt) or type(stop.value).__name__ == "Stopped"
    summary = json.loads((tmp_path / "out" / "movie.json").read_text())
    assert summary["status"] == "stopped" and summary["ended"] == "stopped"
    assert summary["frames_done"] == 8
    report = run_inference(InferConfig(inputs=(str(path),), out=str(tmp_path / "out"), model=str(shipped_model),
                                       follow=True, resume=True, idle_timeout=0.5, **ENGINE))
    assert not report.stacks[0].skipped and report.stacks[0].frames == 16  # --resume goes on after a stop


@pytest.mark.parametrize(("pattern", "listings"), [("img_{:05d}.tif", 1), ("img_{:d}.tif", 1)])
def test_a_followed_folder_is_not_listed_at_every_poll(tmp_path, pattern, listings):
    """Numbered names: the next name is looked up, the folder is listed once (at the start) for 300 files."""
    frame = np.zeros((4, 4), np.uint16)
    reader = FrameFolder(tmp_path)
    for t in range(300):
        tifffile.imwrite(tmp_path / pattern.format(t), frame)
        reader.poll()
    assert reader.n == 299 and reader.listings == listings
    assert reader.poll(final=True) == 300


def test_a_folder_with_names_that_do_not_count_up_is_listed_only_when_it_changed(tmp_path):
    frame = np.zeros((4, 4), np.uint16)
    reader = FrameFolder(tmp_path)
    for name in ("a.tif", "b.tif", "c.tif"):
        tifffile.imwrite(tmp_path / name, frame)
        reader.poll()
    before = reader.listings
    for _ in range(50):
        reader.poll()  # nothing new: no listing
    assert reader.listings == before and reader.n == 2


def test_next_name_keeps_the_padding():
    assert next_name("img_0009.tif") == "img_0010.tif"
    assert next_name("img_9.ome.tif") == "img_10.ome.tif"
    assert next_name("scan3_t99.npy") == "scan3_t100.npy"
