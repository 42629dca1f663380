"""MemoryTracker: readings over a run, a CSV log, maxima, phase peaks, a plot and a leak check."""

from __future__ import annotations

import csv
import math
import operator
import os
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from decode_mem.errors import ConfigError
from decode_mem.memory.leak import LeakReport, MemoryLeakWarning, fit_trend
from decode_mem.memory.peaks import PhasePeak, measure_phase
from decode_mem.memory.readings import READING_KEYS, gpu_reading, parse_device, read_host_memory

#: every CSV log has exactly these columns, in this order (empty cells where a reading is unavailable)
CSV_COLUMNS = ("elapsed_s", "step", "phase", *READING_KEYS)


class MemoryTracker:
    """Record memory readings over a run: ``update()`` per step, a CSV log, maxima, a plot, a leak check.

    ``log_file``: CSV *log* (not a result file) appended one row at a time and flushed, so it is
    readable while the run goes on; the first ``update()`` and every ``log_interval``-th after it
    (calls 1, 1+k, 1+2k, ...) write a row. ``mode="w"`` starts the file afresh with the header,
    ``mode="a"`` appends to an existing log with the same header (elapsed_s restarts at 0).
    ``device``: which CUDA device to read (None: the current one; ``"cpu"``: no GPU readings).

    ``history`` is bounded: at most ``history_size`` rows whatever the run's length. When full, every
    second row is dropped and from then on only every 2nd (4th, 8th, ...) update is kept, so the
    history always spans the whole run at a coarser resolution (about 100 kB per 1000 rows).
    ``get_max_usage()`` is exact regardless: maxima are kept over every update. Thread-safe.
    """

    def __init__(self, log_file: str | os.PathLike | None = None, log_interval: int = 10,
                 device: int | str | None = None, *, history_size: int = 8192, mode: str = "w") -> None:
        if not (isinstance(log_interval, int) and log_interval >= 1):
            raise ConfigError(f"log_interval: must be an integer >= 1, got {log_interval!r}")
        if not (isinstance(history_size, int) and history_size >= 2):
            raise ConfigError(f"history_size: must be an integer >= 2, got {history_size!r}")
        if mode not in ("w", "a"):
            raise ConfigError(f"mode: must be 'w' or 'a', got {mode!r}")
        self.log_file = Path(log_file) if log_file is not None else None
        self.log_interval = log_interval
        self._gpu, self._device = parse_device(device)
        self._mode = mode
        self._lock = threading.RLock()
        self._t0 = time.perf_counter()
        self._cap = history_size + history_size % 2  # even, so thinning keeps a regular stride
        self._rows = np.full((self._cap, 2 + len(READING_KEYS)), np.nan)  # elapsed_s, step, readings
        self._phases: list[str | None] = []
        self._len = 0
        self._stride = 1
        self._n = 0
        self._max: dict[str, float | None] = dict.fromkeys(READING_KEYS)
        self._last: dict[str, object] | None = None
        self._csv_started = False
        self._sampler: _Sampling | None = None
        self.phase_peaks: dict[str, PhasePeak] = {}  # latest peak per phase name (at most 256 names)
        self.last_leak_report: LeakReport | None = None

    # -- recording
    def update(self, step: int | None = None, phase: str | None = None, *,
               force_log: bool = False) -> dict[str, object]:
        """Read host (and, when CUDA is in use, GPU) memory now, record it and return the row."""
        reading = read_host_memory()
        reading.update(gpu_reading(self._gpu, self._device))
        return self.record(reading, step, phase, force_log=force_log)

    def record(self, reading: Mapping[str, float | None], step: int | None = None, phase: str | None = None,
               *, force_log: bool = False) -> dict[str, object]:
        """Record a reading measured elsewhere (keys from ``READING_KEYS``; missing ones are None)."""
        unknown = set(reading) - set(READING_KEYS)
        if unknown:
            raise ConfigError(f"reading: unknown keys {sorted(unknown)}; expected some of {list(READING_KEYS)}")
        if step is not None:
            try:
                step = operator.index(step)
            except TypeError:
                raise ConfigError(f"step: must be an integer or None, got {step!r}") from None
        values = [None if reading.get(k) is None else float(reading[k]) for k in READING_KEYS]
        with self._lock:
            row = {"elapsed_s": time.perf_counter() - self._t0, "step": step,
                   "phase": None if phase is None else str(phase), **dict(zip(READING_KEYS, values, strict=True))}
            index, self._n = self._n, self._n + 1
            if index % self._stride == 0:
                if self._len == self._cap:
                    half = self._cap // 2
                    self._rows[:half] = self._rows[0::2]
                    self._rows[half:] = np.nan
                    self._phases = self._phases[0::2]
                    self._len, self._stride = half, self._stride * 2
                self._rows[self._len] = [row["elapsed_s"], np.nan if step is None else step,
                                         *(np.nan if v is None else v for v in values)]
                self._phases.append(row["phase"])
                self._len += 1
            for key, value in zip(READING_KEYS, values, strict=True):
                if value is not None and (self._max[key] is None or value > self._max[key]):
                    self._max[key] = value
            if self.log_file is not None and (force_log or index % self.log_interval == 0):
                self._write_csv(row)
            self._last = row
        return dict(row)

    def _write_csv(self, row: dict[str, object]) -> None:
        path = self.log_file
        header = not self._csv_started
        if header:
            path.parent.mkdir(parents=True, exist_ok=True)
            if self._mode == "a" and path.exists() and path.stat().st_size > 0:
                with open(path, newline="") as f:
                    existing = next(csv.reader(f), [])
                if tuple(existing) != CSV_COLUMNS:
                    raise ConfigError(f"log_file: {path} has columns {existing}, not {list(CSV_COLUMNS)}")
                header = False
        cells = ["" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()]
        with open(path, "w" if header and self._mode == "w" else "a", newline="") as f:
            writer = csv.writer(f)
            if header:
                writer.writerow(CSV_COLUMNS)
            writer.writerow(cells)
            f.flush()
        self._csv_started = True

    # -- results
    @property
    def n_updates(self) -> int:
        return self._n

    @property
    def history(self) -> dict[str, np.ndarray]:
        """Copy of the kept rows: one array per CSV column (NaN where unavailable; ``phase`` as objects)."""
        with self._lock:
            rows, phases = self._rows[: self._len].copy(), list(self._phases)
        out = {"elapsed_s": rows[:, 0], "step": rows[:, 1]}
        out.update({key: rows[:, 2 + i] for i, key in enumerate(READING_KEYS)})
        out["phase"] = np.array(phases, dtype=object)
        return out

    def get_max_usage(self) -> dict[str, float | None]:
        """Maximum of each reading over every update so far (None where never available)."""
        with self._lock:
            return dict(self._max)

    @contextmanager
    def phase(self, name: str, *, interval: float | None = 0.02, reset_peaks: bool = True) -> Iterator[PhasePeak]:
        """``with tracker.phase("validation") as peak:`` — see ``measure_phase``; kept in ``phase_peaks``."""
        device = "cpu" if not self._gpu else self._device
        with measure_phase(name, interval=interval, device=device, reset_peaks=reset_peaks) as peak:
            try:
                yield peak
            finally:
                with self._lock:
                    self.phase_peaks.pop(name, None)
                    if len(self.phase_peaks) >= 256:
                        self.phase_peaks.pop(next(iter(self.phase_peaks)))
                    self.phase_peaks[name] = peak  # filled in when measure_phase exits, just after this

    def start_sampling(self, interval: float = 0.5, phase: str | None = None) -> _Sampling:
        """Call ``update(phase=phase)`` every ``interval`` s in a daemon thread until ``stop_sampling()``.

        Returns a handle that is also a context manager: ``with tracker.start_sampling(0.5): ...``.
        """
        if not interval > 0:
            raise ConfigError(f"interval: must be > 0 seconds, got {interval}")
        with self._lock:
            if self._sampler is not None:
                raise RuntimeError("MemoryTracker is already sampling; call stop_sampling() first")
            self._sampler = _Sampling(self, float(interval), phase)
            return self._sampler

    def stop_sampling(self) -> None:
        """Stop the sampling thread (no-op if none); re-raises an error the thread met (e.g. a full disk)."""
        with self._lock:
            sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler._halt()
            if sampler.error is not None:
                raise sampler.error

    def close(self) -> None:
        self.stop_sampling()

    def __enter__(self) -> MemoryTracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_leak(self, min_samples: int = 20, threshold_mb_per_1k_steps: float = 10.0, *,
                   threshold_mb_per_hour: float = 100.0, warmup_fraction: float = 0.2, min_r2: float = 0.5,
                   min_growth_mb: float = 10.0, x: str = "auto", phase: str | None = None,
                   warn: bool = True) -> LeakReport:
        """Fit a line to RssAnon (and CUDA allocated, when present) over the history; warn when it climbs.

        The first ``warmup_fraction`` of the rows (caches, allocator pools filling) is ignored. ``x``:
        ``"step"`` (slope per 1000 steps), ``"time"`` (per hour) or ``"auto"`` (steps when at least
        ``min_samples`` rows have one). A trend is a leak when the slope exceeds the threshold, the fit
        explains the data (R^2 >= ``min_r2``) and the fitted growth over the window is >= ``min_growth_mb``.
        Emits ``MemoryLeakWarning`` per leaking reading when ``warn``. ``phase``: only rows with that label.
        """
        if x not in ("auto", "step", "time"):
            raise ConfigError(f"x: must be 'auto', 'step' or 'time', got {x!r}")
        if not 0.0 <= warmup_fraction < 1.0:
            raise ConfigError(f"warmup_fraction: must be in [0, 1), got {warmup_fraction}")
        h = self.history
        keep = np.ones(len(h["step"]), bool) if phase is None else h["phase"] == phase
        if x == "auto":
            x = "step" if np.isfinite(h["step"][keep]).sum() >= min_samples else "time"
        xs = h["step"] if x == "step" else h["elapsed_s"]
        scale, per, threshold = ((1000.0, "1000 steps", threshold_mb_per_1k_steps) if x == "step"
                                 else (3600.0, "hour", threshold_mb_per_hour))
        trends = []
        for metric in ("rss_anon_mb", "cuda_allocated_mb"):
            ok = keep & np.isfinite(xs) & np.isfinite(h[metric])
            xv, yv = xs[ok], h[metric][ok]
            xv, yv = xv[int(len(xv) * warmup_fraction):], yv[int(len(yv) * warmup_fraction):]
            if len(xv) >= max(min_samples, 3) and np.ptp(xv) > 0:
                trends.append(fit_trend(metric, xv, yv, scale=scale, per=per, threshold=threshold,
                                        min_r2=min_r2, min_growth_mb=min_growth_mb))
        report = LeakReport(tuple(trends))
        self.last_leak_report = report
        for trend in trends:
            if warn and trend.leaking:
                warnings.warn(f"{trend}. Look for objects kept across steps (lists of outputs, losses "
                              "that keep their graph, caches without a bound).", MemoryLeakWarning, stacklevel=2)
        return report

    def report(self) -> str:
        """A few lines for logs: current reading, maxima, phase peaks, last leak check."""
        with self._lock:
            last, maxima, peaks = self._last, dict(self._max), list(self.phase_peaks.values())
        if last is None and not peaks:
            return "MemoryTracker: no readings yet"
        span = f" over {last['elapsed_s']:.1f} s" if last is not None else ""
        lines = [f"MemoryTracker: {self._n} updates{span} (history: {self._len} rows, 1 kept per {self._stride})"]
        if last is not None:
            lines += ["  now: " + _format_reading(last), "  max: " + _format_reading(maxima)]
        lines += [f"  phase {p}" for p in peaks]
        if self.last_leak_report is not None:
            lines.append(f"  leak check: {self.last_leak_report}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"MemoryTracker(log_file={self.log_file!r}, log_interval={self.log_interval}, updates={self._n})"

    def plot_history(self, output_file: str | os.PathLike) -> Path:
        """Write a PNG: host memory (RssAnon, VmRSS, RssFile; RssShmem when used) against step or time,
        and GPU memory (allocated, reserved, NVML used/total) in a second panel when there is any."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        from decode_mem.io.atomic import atomic_output

        h = self.history
        n = len(h["step"])
        by_step = n > 0 and bool(np.isfinite(h["step"]).all())
        xs, xlabel = (h["step"], "step") if by_step else (h["elapsed_s"], "elapsed time [s]")
        gpu_keys = [k for k in ("cuda_allocated_mb", "cuda_reserved_mb", "nvml_used_mb", "nvml_total_mb")
                    if np.isfinite(h[k]).any()]
        panels = [("host memory [MB]", [("rss_anon_mb", "RssAnon", "-"), ("vm_rss_mb", "VmRSS", "-"),
                                        ("rss_file_mb", "RssFile", "-"), ("rss_shmem_mb", "RssShmem", "-")])]
        if gpu_keys:
            panels.append(("GPU memory [MB]", [("cuda_allocated_mb", "CUDA allocated", "-"),
                                               ("cuda_reserved_mb", "CUDA reserved", "-"),
                                               ("nvml_used_mb", "NVML used (whole device)", "-")]))
        fig = Figure(figsize=(8.0, 3.0 * len(panels)), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
        for ax, (ylabel, series) in zip(axes, panels, strict=True):
            for key, label, style in series:
                y = h[key]
                if np.isfinite(y).any() and not (key == "rss_shmem_mb" and np.nanmax(y) < 1.0):
                    ax.plot(xs, y, style, label=label, linewidth=1.2)
            ax.set_ylabel(ylabel)
            if ylabel.startswith("GPU") and np.isfinite(h["nvml_total_mb"]).any():
                ax.set_title(f"device total {np.nanmax(h['nvml_total_mb']):.0f} MB", fontsize="small", loc="right")
            ax.grid(alpha=0.3)
            if ax.lines:
                ax.legend(loc="best", fontsize="small")
            else:
                ax.text(0.5, 0.5, "no readings", ha="center", va="center", transform=ax.transAxes)
        phases = list(dict.fromkeys(str(p) for p in h.get("phase", ()) if p))
        what = "host and GPU memory" if gpu_keys else "host memory"
        axes[0].set_title(f"{what} of the process by {xlabel.split(' [')[0]}; {n} of {self._n} readings kept"
                          + (f"\nphases: {', '.join(phases)}" if phases else ""),  # two lines: none is cut
                          loc="left", fontsize="medium")
        axes[-1].set_xlabel(xlabel)
        with atomic_output(output_file) as tmp:
            fig.savefig(tmp, format="png", dpi=100)
        return Path(output_file)


def _format_reading(reading: Mapping[str, object]) -> str:
    names = {"vm_rss_mb": "VmRSS", "rss_anon_mb": "RssAnon", "rss_file_mb": "RssFile", "rss_shmem_mb": "RssShmem",
             "vm_hwm_mb": "VmHWM", "cuda_allocated_mb": "CUDA alloc", "cuda_reserved_mb": "CUDA reserved",
             "cuda_max_allocated_mb": "CUDA max alloc", "nvml_used_mb": "NVML used"}
    return ", ".join(f"{label} {reading[key]:.1f} MB" for key, label in names.items()
                     if isinstance(reading.get(key), float) and math.isfinite(reading[key]))


class _Sampling:
    """Handle of ``MemoryTracker.start_sampling``: a daemon thread calling ``update()``; a context manager."""

    def __init__(self, tracker: MemoryTracker, interval: float, phase: str | None) -> None:
        self.tracker, self.interval, self.phase = tracker, interval, phase
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="decode_mem-memory-sampling", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tracker.update(phase=self.phase)
            except BaseException as err:  # keep it for stop_sampling(); a dead thread must not go unnoticed
                self.error = err
                return

    def _halt(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Same as ``tracker.stop_sampling()`` while this handle is the tracker's sampler."""
        if self.tracker._sampler is self:
            self.tracker.stop_sampling()
        else:
            self._halt()

    def __enter__(self) -> _Sampling:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.stop()
        else:  # do not mask the body's exception with the thread's
            with self.tracker._lock:
                if self.tracker._sampler is self:
                    self.tracker._sampler = None
            self._halt()


