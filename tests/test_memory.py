"""MemoryTracker and the memory helpers: readings, CSV log, phase peaks, plot, leak check, bounded history."""

from __future__ import annotations

import contextlib
import csv
import ctypes
import subprocess
import sys
import threading
import time
import types
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from decode_mem.errors import ConfigError
from decode_mem.memory import (
    CSV_COLUMNS,
    CUDA_KEYS,
    NVML_KEYS,
    READING_KEYS,
    MemoryLeakWarning,
    MemoryTracker,
    PeakSampler,
    ProcessPeak,
    measure_phase,
    read_gpu_memory,
    read_host_memory,
    readings,
)

pytestmark = pytest.mark.serial  # this process's own memory and its sampling threads' timing: no other worker beside

LINUX_PROC = Path("/proc/self/status").exists()
needs_proc = pytest.mark.skipif(not LINUX_PROC, reason="needs /proc/self/status (Linux)")
MiB = 2**20


def _touch_anon(mb: int) -> np.ndarray:
    return np.ones(mb * MiB // 8)  # written, so every page is resident


@pytest.fixture
def trimmed_heap() -> None:
    """Hand free malloc memory back to the kernel first (glibc), so that new arrays need new pages.

    Earlier tests can leave hundreds of MB free but resident in the heap; malloc serves a new array
    from there and RssAnon, rightly, does not move.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


def _wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


# ------------------------------------------------------------------------------------------ readings

@needs_proc
def test_host_reading_splits_vmrss_into_anon_file_shmem() -> None:
    r = read_host_memory()
    assert r["rss_anon_mb"] > 0 and r["vm_hwm_mb"] >= r["vm_rss_mb"] - 1
    assert r["vm_rss_mb"] == pytest.approx(r["rss_anon_mb"] + r["rss_file_mb"] + r["rss_shmem_mb"], abs=1.0)


def test_host_reading_falls_back_to_psutil_without_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_proc(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("no /proc here")

    monkeypatch.setattr(readings, "open", no_proc, raising=False)
    r = read_host_memory()
    assert r["vm_rss_mb"] > 0
    assert r["rss_anon_mb"] is None and r["rss_file_mb"] is None and r["rss_shmem_mb"] is None
    assert all(v is None for v in read_host_memory(pid=2**22 + 12345).values())  # no such process: empty


def test_importing_the_module_imports_neither_torch_nor_matplotlib() -> None:
    code = "import sys, decode_mem.memory; print(sorted({'torch', 'matplotlib', 'pynvml'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_gpu_means_empty_gpu_columns_and_cuda_never_initialized(tmp_path: Path) -> None:
    import torch

    assert not torch.cuda.is_initialized()
    tracker = MemoryTracker(tmp_path / "log.csv", log_interval=1)
    row = tracker.update(step=0)
    with tracker.phase("p") as peak:
        pass
    assert all(row[k] is None for k in CUDA_KEYS + NVML_KEYS)
    assert all(v is None for v in read_gpu_memory().values())
    assert peak.cuda_max_allocated_mb is None
    assert not torch.cuda.is_initialized()
    assert _rows(tmp_path / "log.csv")[1][CSV_COLUMNS.index("cuda_allocated_mb"):] == [""] * 6


# ------------------------------------------------------------------------------------------ CSV log

def test_csv_has_fixed_header_and_one_row_per_log_interval(tmp_path: Path) -> None:
    log = tmp_path / "sub" / "memory.csv"
    tracker = MemoryTracker(log, log_interval=10)
    for step in range(25):
        row = tracker.update(step=step, phase="train")
        if LINUX_PROC:
            assert row["rss_anon_mb"] > 0
    rows = _rows(log)
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [r[1] for r in rows[1:]] == ["0", "10", "20"]  # calls 1, 11, 21
    assert all(len(r) == len(CSV_COLUMNS) and r[2] == "train" for r in rows[1:])
    tracker.update(step=25, force_log=True)
    assert len(_rows(log)) == 5

    resumed = MemoryTracker(log, log_interval=10, mode="a")  # appends under the same header
    resumed.update(step=26)
    rows = _rows(log)
    assert len(rows) == 6 and rows.count(list(CSV_COLUMNS)) == 1
    MemoryTracker(log).update()  # mode "w" starts afresh
    assert len(_rows(log)) == 2

    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="columns"):
        MemoryTracker(other, mode="a").update()


# ------------------------------------------------------------------------------------------ phase peaks

@needs_proc
@pytest.mark.usefixtures("trimmed_heap")
def test_phase_catches_a_freed_200mb_allocation() -> None:
    tracker = MemoryTracker()
    with tracker.phase("alloc", interval=0.01) as peak:
        a = _touch_anon(200)
        time.sleep(0.2)
        del a
    assert peak.rss_anon_delta_mb >= 180, peak
    # the phase's end reading is the process's RssAnon then, and the 200 MB were freed: back to the start, after a
    # trim where the allocator kept the pages (it did, late in a full suite run: 201 MB still resident)
    assert abs(peak.rss_anon_end_mb - read_host_memory()["rss_anon_mb"]) < 20
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
    assert read_host_memory()["rss_anon_mb"] - peak.rss_anon_start_mb < 50
    assert peak.n_samples >= 3
    if peak.hwm_exact:  # VmHWM reset through /proc/self/clear_refs worked: an exact VmRSS peak
        assert peak.vm_hwm_mb - peak.rss_anon_start_mb >= 180
    assert tracker.phase_peaks["alloc"] is peak and "alloc" in tracker.report()


@needs_proc
@pytest.mark.usefixtures("trimmed_heap")
def test_memmapped_file_counts_in_rssfile_not_rssanon(tmp_path: Path) -> None:
    path = tmp_path / "stack.bin"
    chunk = np.arange(MiB // 8, dtype=np.float64)
    with open(path, "wb") as f:
        for _ in range(100):
            f.write(chunk.tobytes())
    m = np.memmap(path, dtype=np.float64, mode="r")
    with measure_phase("stream", interval=0.01) as peak:
        before = read_host_memory()
        total = sum(float(m[i: i + MiB].sum()) for i in range(0, len(m), MiB))  # touches every page
        after = read_host_memory()
    del m
    assert total > 0
    file_backed = (after["rss_file_mb"] + after["rss_shmem_mb"]) - (before["rss_file_mb"] + before["rss_shmem_mb"])
    assert file_backed >= 80
    assert after["rss_anon_mb"] - before["rss_anon_mb"] < 20
    assert peak.rss_anon_delta_mb < 20 and peak.vm_rss_mb - before["vm_rss_mb"] >= 80


@needs_proc
@pytest.mark.usefixtures("trimmed_heap")
def test_nested_phases_keep_the_outer_peak() -> None:
    with measure_phase("outer", interval=None) as outer:
        a = _touch_anon(64)
        del a  # whether the allocator hands these pages back or keeps them does not matter below
        rss_before_inner = read_host_memory()["vm_rss_mb"]
        with measure_phase("inner", interval=None) as inner:  # resets VmHWM again
            pass
    if not outer.hwm_exact:
        pytest.skip("VmHWM cannot be reset here (/proc/self/clear_refs)")
    assert outer.vm_hwm_mb - outer.rss_anon_start_mb >= 55  # the peak before the inner reset was kept
    assert inner.vm_hwm_mb < rss_before_inner + 10  # the inner phase saw only what was resident at its start
    assert outer.n_samples == 2  # interval=None: entry and exit only


@needs_proc
@pytest.mark.usefixtures("trimmed_heap")
def test_peak_sampler_standalone() -> None:
    with PeakSampler(0.005) as s:
        a = _touch_anon(32)
        n = s.n_samples
        assert _wait_until(lambda: s.n_samples >= n + 2)
        del a
    assert s.peak["rss_anon_mb"] - s.start_reading["rss_anon_mb"] >= 28
    assert not any(t.name == "decode_mem-peak-sampler" for t in threading.enumerate())


# ------------------------------------------------------------------------------------------ fake CUDA

class _FakeCuda:
    """Just enough of torch.cuda for the tracker: an initialized device 0 with allocator counters."""

    def __init__(self) -> None:
        self.allocated, self.peak, self.resets = 100 * MiB, 300 * MiB, 0

    def is_initialized(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def memory_stats(self, index: int) -> dict:
        return {"allocated_bytes.all.current": self.allocated, "allocated_bytes.all.peak": self.peak,
                "reserved_bytes.all.current": 2 * self.peak, "reserved_bytes.all.peak": 2 * self.peak}

    def reset_peak_memory_stats(self, index: int) -> None:
        self.peak, self.resets = self.allocated, self.resets + 1

    def alloc(self, nbytes: int) -> None:
        self.allocated += nbytes
        self.peak = max(self.peak, self.allocated)


def _fake_pynvml(fail_init: bool) -> types.ModuleType:
    mod = types.ModuleType("pynvml")

    def init() -> None:
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    mod.nvmlInit = init
    mod.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=5000 * MiB, total=80000 * MiB, free=0)
    return mod


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> _FakeCuda:
    cuda = _FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(readings, "NVML", readings._Nvml())
    return cuda


def test_gpu_readings_when_cuda_is_in_use(fake_cuda: _FakeCuda, monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(fail_init=True))
    r = read_gpu_memory()
    assert r["cuda_allocated_mb"] == 100 and r["cuda_max_allocated_mb"] == 300 and r["cuda_reserved_mb"] == 600
    assert r["nvml_used_mb"] is None and r["nvml_total_mb"] is None  # NVML failed: empty, no crash
    assert read_gpu_memory("cpu")["cuda_allocated_mb"] is None

    monkeypatch.setattr(readings, "NVML", readings._Nvml())
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(fail_init=False))
    tracker = MemoryTracker(tmp_path / "log.csv", log_interval=1, device="cuda:0")
    row = tracker.update(step=0)
    assert row["nvml_used_mb"] == 5000 and row["nvml_total_mb"] == 80000
    assert _rows(tmp_path / "log.csv")[1][CSV_COLUMNS.index("nvml_total_mb")] == "80000.000"

    with tracker.phase("val", interval=None) as peak:
        assert fake_cuda.resets == 1  # reset_peak_memory_stats at entry
        fake_cuda.alloc(50 * MiB)
        fake_cuda.alloc(-50 * MiB)
    assert peak.cuda_allocated_start_mb == 100 and peak.cuda_max_allocated_mb == 150 and peak.cuda_delta_mb == 50

    with measure_phase("outer", interval=None) as outer:
        fake_cuda.alloc(400 * MiB)
        fake_cuda.alloc(-400 * MiB)
        with measure_phase("inner", interval=None) as inner:
            pass
    assert outer.cuda_max_allocated_mb == 500 and inner.cuda_max_allocated_mb == 100
    tracker.plot_history(tmp_path / "gpu.png")
    assert (tmp_path / "gpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------ plot

def test_plot_history_writes_a_png_without_pyplot_state(tmp_path: Path) -> None:
    tracker = MemoryTracker()
    for step in range(50):
        tracker.update(step=step)
    pyplot_loaded = "matplotlib.pyplot" in sys.modules
    out = tracker.plot_history(tmp_path / "memory.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert ("matplotlib.pyplot" in sys.modules) == pyplot_loaded
    assert not list(tmp_path.glob("*.partial"))
    MemoryTracker().plot_history(tmp_path / "empty.png")  # no readings yet: still a valid figure
    assert (tmp_path / "empty.png").read_bytes()[:4] == b"\x89PNG"


# ------------------------------------------------------------------------------------------ leak check

def test_check_leak_warns_on_a_steady_climb() -> None:
    rng = np.random.default_rng(0)
    tracker = MemoryTracker()
    for step in range(500):
        tracker.record({"rss_anon_mb": 800 + 0.05 * step + rng.normal(0, 0.5)}, step=step)
    with pytest.warns(MemoryLeakWarning, match=r"RssAnon grows by 5\d\.\d MB per 1000 steps over 400 samples"):
        report = tracker.check_leak(min_samples=50, threshold_mb_per_1k_steps=10)
    assert report.leaking and report.n == 400 and report.r2 > 0.9
    assert report.slope == pytest.approx(50, rel=0.1)
    assert "possible leak" in tracker.report()


def test_check_leak_is_quiet_on_a_flat_history() -> None:
    rng = np.random.default_rng(1)
    tracker = MemoryTracker()
    for step in range(500):
        tracker.record({"rss_anon_mb": 800 + rng.normal(0, 2.0), "cuda_allocated_mb": 1000.0}, step=step)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = tracker.check_leak()
    assert not report.leaking and len(report.trends) == 2
    assert not MemoryTracker().check_leak().leaking  # no samples: nothing to say


@pytest.mark.usefixtures("trimmed_heap")
def test_check_leak_sees_gpu_growth_and_real_host_growth() -> None:
    tracker = MemoryTracker()
    for step in range(100):
        tracker.record({"rss_anon_mb": 800.0, "cuda_allocated_mb": 1000 + 0.5 * step}, step=step)
    with pytest.warns(MemoryLeakWarning, match="CUDA allocated grows"):
        assert tracker.check_leak().trends[1].leaking

    if not LINUX_PROC:
        return
    kept = []
    tracker = MemoryTracker()
    for step in range(60):
        kept.append(_touch_anon(1))  # a list that grows by 1 MB per step
        tracker.update(step=step)
    with pytest.warns(MemoryLeakWarning, match="RssAnon grows"):
        report = tracker.check_leak(min_samples=20)
    assert report.slope > 500  # about 1000 MB per 1000 steps
    del kept


# ------------------------------------------------------------------------------------------ bounded history

def test_history_stays_bounded_and_spans_the_run() -> None:
    tracker = MemoryTracker(history_size=64)
    for step in range(20_000):
        tracker.record({"rss_anon_mb": float(step % 977), "vm_rss_mb": 1.0}, step=step, phase="train")
    h = tracker.history
    assert 32 <= len(h["step"]) <= 64 and len(tracker._phases) == len(h["step"])
    assert tracker._rows.shape == (64, 2 + len(READING_KEYS))
    assert h["step"][0] == 0 and h["step"][-1] > 19_000 - 20_000 / 32
    assert len(set(np.diff(h["step"]))) == 1  # evenly thinned
    assert tracker.n_updates == 20_000 and tracker.get_max_usage()["rss_anon_mb"] == 976  # exact over all


# ------------------------------------------------------------------------------------------ sampling thread

def _sampling_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "decode_mem-memory-sampling"]


def test_sampling_thread_starts_and_stops_cleanly(tmp_path: Path) -> None:
    tracker = MemoryTracker()
    handle = tracker.start_sampling(0.01, phase="bg")
    with pytest.raises(RuntimeError, match="already sampling"):
        tracker.start_sampling(0.01)
    assert _wait_until(lambda: tracker.n_updates >= 3)
    tracker.stop_sampling()
    n = tracker.n_updates
    assert n >= 3 and not handle.running and not _sampling_threads()
    assert set(tracker.history["phase"]) == {"bg"}
    time.sleep(0.03)
    assert tracker.n_updates == n
    tracker.stop_sampling()  # not sampling: nothing to do

    with MemoryTracker() as t2, t2.start_sampling(0.01):
        assert _wait_until(lambda: t2.n_updates >= 2)
    assert t2.n_updates >= 2 and not _sampling_threads()

    broken = MemoryTracker(tmp_path, log_interval=1)  # a directory as the log file: every write fails
    handle = broken.start_sampling(0.01)
    assert _wait_until(lambda: not handle.running)  # the thread met the error and ended
    with pytest.raises(OSError):
        broken.stop_sampling()


def test_invalid_arguments_name_the_parameter() -> None:
    for kwargs, key in [({"log_interval": 0}, "log_interval"), ({"device": "tpu"}, "device"),
                        ({"device": -1}, "device"), ({"mode": "x"}, "mode"), ({"history_size": 1}, "history_size")]:
        with pytest.raises(ConfigError, match=key):
            MemoryTracker(**kwargs)
    tracker = MemoryTracker()
    with pytest.raises(ConfigError, match="unknown keys"):
        tracker.record({"rss": 1.0})
    with pytest.raises(ConfigError, match="step"):
        tracker.update(step=1.5)
    assert tracker.report() == "MemoryTracker: no readings yet"


# ------------------------------------------------------------------------------------------ real GPU

@pytest.mark.gpu
def test_real_cuda_readings_and_phase_peak() -> None:
    import torch

    tracker = MemoryTracker(device=0)
    x = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
    row = tracker.update()
    assert row["cuda_allocated_mb"] >= 256 and row["cuda_reserved_mb"] >= row["cuda_allocated_mb"]
    if row["nvml_used_mb"] is not None:
        assert row["nvml_total_mb"] > row["nvml_used_mb"] >= 256
    with tracker.phase("tmp") as peak:
        y = torch.empty(512 * MiB, dtype=torch.uint8, device="cuda")
        del y
    assert peak.cuda_delta_mb >= 500 and peak.cuda_allocated_start_mb >= 256
    del x


CHILD_HOLDS_200_MIB = "import numpy as np, time; a = np.ones(200 * 2**20 // 8); time.sleep(0.5)"


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="needs /proc to read RssAnon")
def test_process_peak_reads_a_child_and_stops_it_above_its_cap() -> None:
    """The child's own anonymous memory (200 MiB of ones) is seen; with a cap below it, the child is killed."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD_HOLDS_200_MIB])
    watcher = ProcessPeak(proc, interval=0.005)
    proc.wait()
    peak = watcher.join()
    assert peak is not None and 200 <= peak < 400 and not watcher.capped
    proc = subprocess.Popen([sys.executable, "-c", CHILD_HOLDS_200_MIB])
    watcher = ProcessPeak(proc, interval=0.005, cap_mb=100)
    assert proc.wait(timeout=30) != 0
    assert watcher.capped and watcher.join() > 100
