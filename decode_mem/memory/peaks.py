"""Peak memory of one phase: a sampling thread for RssAnon, VmHWM reset for an exact VmRSS peak, CUDA peaks.

VmHWM and torch's peak counters are process-wide. Resetting them is the only way to get a per-phase
peak, so phases being measured register here, and every reset first hands them the peak so far:
nested and concurrent phases stay exact. (A reset made directly by user code is not seen.)
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from decode_mem.errors import ConfigError
from decode_mem.memory.readings import MB, cuda_in_use, cuda_stats, parse_device, read_host_memory

_RESET_LOCK = threading.Lock()
_ACTIVE: list[_Watch] = []  # phases being measured
_HWM_RESET = {"works": None}  # does /proc/self/clear_refs "5" reset VmHWM here? (None: not tried yet)


@dataclass
class _Watch:
    cuda_index: int | None
    hwm_mb: float = 0.0
    cuda_alloc_mb: float = 0.0
    cuda_reserved_mb: float = 0.0


def reset_vm_hwm() -> bool:
    """Reset this process's VmHWM to its current VmRSS (``echo 5 > /proc/self/clear_refs``, Linux >= 4.0).

    Returns whether it worked (tried once per process; False on other systems or where it is refused).
    """
    with _RESET_LOCK:
        if _HWM_RESET["works"] is False:
            return False
        before = read_host_memory()["vm_hwm_mb"]
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            _HWM_RESET["works"] = False
            return False
        after = read_host_memory()
        works = after["vm_hwm_mb"] is not None and after["vm_hwm_mb"] <= (after["vm_rss_mb"] or 0.0) + 16.0
        _HWM_RESET["works"] = works
        for watch in _ACTIVE:
            watch.hwm_mb = max(watch.hwm_mb, before or 0.0)
        return works


def _reset_cuda_peak(index: int) -> None:
    cuda = sys.modules["torch"].cuda  # only called where CUDA is in use, so torch is imported
    with _RESET_LOCK:
        stats = cuda_stats(index)
        for watch in _ACTIVE:
            if watch.cuda_index == index:
                watch.cuda_alloc_mb = max(watch.cuda_alloc_mb, stats.get("allocated_bytes.all.peak", 0) / MB)
                watch.cuda_reserved_mb = max(watch.cuda_reserved_mb, stats.get("reserved_bytes.all.peak", 0) / MB)
        with contextlib.suppress(Exception):  # if it fails, the peak counts from earlier: too high, never too low
            cuda.reset_peak_memory_stats(index)


class PeakSampler:
    """Sample host memory every ``interval`` s in a daemon thread and keep the maxima.

    ``with PeakSampler(0.02) as s: ...`` then ``s.peak["rss_anon_mb"]``; ``s.start_reading`` and
    ``s.end_reading`` are the samples taken at start and stop. With ``interval=None`` there is no thread
    (only those two samples). A peak shorter than the interval, or one that comes and goes inside one C
    call holding the GIL, can be missed; VmHWM (``reset_vm_hwm``) cannot miss it but includes file pages.
    """

    KEYS = ("vm_rss_mb", "rss_anon_mb")

    def __init__(self, interval: float | None = 0.02) -> None:
        if interval is not None and not interval > 0:
            raise ConfigError(f"interval: must be > 0 seconds or None, got {interval}")
        self.interval = interval
        self.start_reading: dict[str, float | None] = {}
        self.end_reading: dict[str, float | None] = {}
        self.peak: dict[str, float | None] = dict.fromkeys(self.KEYS)
        self.n_samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> dict[str, float | None]:
        reading = read_host_memory()
        for key in self.KEYS:
            if reading[key] is not None:
                self.peak[key] = reading[key] if self.peak[key] is None else max(self.peak[key], reading[key])
        self.n_samples += 1
        return reading

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> PeakSampler:
        self.start_reading = self._sample()
        if self.interval is not None:
            self._thread = threading.Thread(target=self._run, name="decode_mem-peak-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self.end_reading = self._sample()

    def __enter__(self) -> PeakSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ProcessPeak:
    """Peak RssAnon (MiB) of another running process (a child started with ``subprocess.Popen``), read from
    /proc every ``interval`` s in a daemon thread until it exits; above ``cap_mb`` it is killed (``capped``),
    so that one measured run cannot take the machine down. ``ProcessPeak(proc).join()`` after the process
    ended gives the peak (``None`` where no reading could be taken, e.g. without /proc)."""

    def __init__(self, proc: Any, interval: float = 0.01, cap_mb: float | None = None) -> None:
        self.proc, self.interval, self.cap_mb = proc, interval, cap_mb
        self.peak_mb: float | None = None
        self.capped = False
        self._thread = threading.Thread(target=self._run, name="decode_mem-process-peak", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self.proc.poll() is None:
            anon = read_host_memory(self.proc.pid).get("rss_anon_mb")
            if anon is not None:
                self.peak_mb = anon if self.peak_mb is None else max(self.peak_mb, anon)
                if self.cap_mb is not None and self.peak_mb > self.cap_mb:
                    self.capped = True
                    self.proc.kill()
                    return
            time.sleep(self.interval)

    def join(self) -> float | None:
        """Wait for the sampling thread (it ends with the process) and return the peak."""
        self._thread.join()
        return self.peak_mb


@dataclass
class PhasePeak:
    """Peak memory of one phase, filled in when its ``with`` block exits (MB; None where unavailable).

    ``rss_anon_mb``/``vm_rss_mb``: sampled peaks (``n_samples`` samples). ``vm_hwm_mb``: exact peak
    VmRSS of the phase when VmHWM could be reset at entry (``hwm_exact``), else None; ``anon_hwm_mb`` that peak
    less the file-backed and shared pages at exit, and ``rss_anon_peak_mb`` the larger of it and the sampled
    RssAnon peak (a peak between samples is not missed). CUDA peaks:
    ``reset_peak_memory_stats()`` at entry (when CUDA was initialized), ``max_memory_*`` at exit.
    """

    name: str = ""
    duration_s: float = 0.0
    rss_anon_start_mb: float | None = None
    rss_anon_end_mb: float | None = None
    rss_anon_mb: float | None = None
    vm_rss_mb: float | None = None
    vm_hwm_mb: float | None = None
    hwm_exact: bool = False
    anon_hwm_mb: float | None = None
    cuda_allocated_start_mb: float | None = None
    cuda_max_allocated_mb: float | None = None
    cuda_max_reserved_mb: float | None = None
    n_samples: int = 0

    @property
    def rss_anon_peak_mb(self) -> float | None:
        """Peak RssAnon that a short peak between samples cannot hide: the larger of the sampled peak and
        ``anon_hwm_mb`` (exact VmRSS peak less the file-backed and shared pages at exit)."""
        values = [v for v in (self.rss_anon_mb, self.anon_hwm_mb) if v is not None]
        return max(values) if values else None

    @property
    def rss_anon_delta_mb(self) -> float | None:
        """How far RssAnon rose above its value at entry."""
        return _sub(self.rss_anon_mb, self.rss_anon_start_mb)

    @property
    def cuda_delta_mb(self) -> float | None:
        """How far CUDA allocated memory rose above its value at entry."""
        return _sub(self.cuda_max_allocated_mb, self.cuda_allocated_start_mb)

    def __str__(self) -> str:
        text = f"{self.name or 'phase'} ({self.duration_s:.2f} s): RssAnon peak {_mb(self.rss_anon_mb)}"
        text += f" (+{_mb(self.rss_anon_delta_mb)})"
        if self.vm_hwm_mb is not None:
            text += f", VmRSS peak {_mb(self.vm_hwm_mb)}"
        if self.cuda_max_allocated_mb is not None:
            text += f", CUDA max allocated {_mb(self.cuda_max_allocated_mb)} (+{_mb(self.cuda_delta_mb)})"
            text += f", max reserved {_mb(self.cuda_max_reserved_mb)}"
        return text


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} MB"


@contextmanager
def measure_phase(name: str = "", *, interval: float | None = 0.02, device: int | str | None = None,
                  reset_peaks: bool = True) -> Iterator[PhasePeak]:
    """``with measure_phase("validation") as peak: ...`` then ``peak.rss_anon_mb``, ``peak.cuda_max_allocated_mb``.

    Host: RssAnon and VmRSS sampled every ``interval`` s in a thread (None: at entry and exit only);
    with ``reset_peaks``, VmHWM is reset at entry for an exact VmRSS peak. CUDA (only where it is
    initialized; never initialized here): with ``reset_peaks``, ``reset_peak_memory_stats()`` at entry.
    The resets are process-wide: elsewhere, VmHWM and ``max_memory_allocated()`` then count since the
    last reset. Without ``reset_peaks`` the CUDA peak is the one since the last reset.
    """
    enabled, wanted = parse_device(device)
    peak = PhasePeak(name=name)
    peak.hwm_exact = reset_peaks and reset_vm_hwm()
    index = cuda_in_use(wanted) if enabled else None
    if index is not None:
        if reset_peaks:
            _reset_cuda_peak(index)
        peak.cuda_allocated_start_mb = cuda_stats(index).get("allocated_bytes.all.current", 0) / MB
    watch = _Watch(index)
    sampler = PeakSampler(interval)
    t0 = time.perf_counter()
    with _RESET_LOCK:
        _ACTIVE.append(watch)
    try:
        sampler.start()
        yield peak
    finally:
        sampler.stop()
        peak.duration_s = time.perf_counter() - t0
        with _RESET_LOCK:
            _ACTIVE.remove(watch)
        end = sampler.end_reading
        peak.rss_anon_start_mb, peak.rss_anon_end_mb = sampler.start_reading.get("rss_anon_mb"), end["rss_anon_mb"]
        peak.rss_anon_mb, peak.vm_rss_mb = sampler.peak["rss_anon_mb"], sampler.peak["vm_rss_mb"]
        peak.n_samples = sampler.n_samples
        if peak.hwm_exact and end["vm_hwm_mb"] is not None:
            peak.vm_hwm_mb = max(end["vm_hwm_mb"], watch.hwm_mb)
            if end["rss_file_mb"] is not None and end["rss_shmem_mb"] is not None:
                peak.anon_hwm_mb = peak.vm_hwm_mb - end["rss_file_mb"] - end["rss_shmem_mb"]
        if index is None and enabled:  # CUDA started inside the phase: its peak so far is the phase's
            index = cuda_in_use(wanted)
            peak.cuda_allocated_start_mb = 0.0 if index is not None else None
        if index is not None:
            stats = cuda_stats(index)
            peak.cuda_max_allocated_mb = max(stats.get("allocated_bytes.all.peak", 0) / MB, watch.cuda_alloc_mb)
            peak.cuda_max_reserved_mb = max(stats.get("reserved_bytes.all.peak", 0) / MB, watch.cuda_reserved_mb)
