"""One reading of host and GPU memory, in MB (MiB); ``None`` wherever a number is unavailable.

Host: ``/proc/<pid>/status`` (VmRSS = RssAnon + RssFile + RssShmem, VmHWM = peak VmRSS), psutil where
there is no /proc. GPU: torch's allocator stats and NVML, read only where CUDA is already initialized.
"""

from __future__ import annotations

import sys
import threading
import warnings

from decode_mem.errors import ConfigError

MB = float(2**20)
HOST_KEYS = ("vm_rss_mb", "rss_anon_mb", "rss_file_mb", "rss_shmem_mb", "vm_hwm_mb")
CUDA_KEYS = ("cuda_allocated_mb", "cuda_reserved_mb", "cuda_max_allocated_mb", "cuda_max_reserved_mb")
NVML_KEYS = ("nvml_used_mb", "nvml_total_mb")
READING_KEYS = HOST_KEYS + CUDA_KEYS + NVML_KEYS
_STATUS_FIELDS = {"VmRSS": "vm_rss_mb", "RssAnon": "rss_anon_mb", "RssFile": "rss_file_mb",
                  "RssShmem": "rss_shmem_mb", "VmHWM": "vm_hwm_mb"}


def read_host_memory(pid: int | None = None) -> dict[str, float | None]:
    """VmRSS, RssAnon, RssFile, RssShmem and VmHWM of a process (default: this one), in MB.

    Parsed from ``/proc/<pid>/status`` (tens of µs). Without /proc (macOS, Windows) psutil's ``rss``
    fills ``vm_rss_mb`` and the platform's peak RSS ``vm_hwm_mb``; the other keys stay ``None``.
    """
    out: dict[str, float | None] = dict.fromkeys(HOST_KEYS)
    try:
        with open(f"/proc/{'self' if pid is None else int(pid)}/status") as f:
            text = f.read()
    except OSError:
        return _psutil_host_memory(pid, out)
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in _STATUS_FIELDS:
            out[_STATUS_FIELDS[key]] = int(value.split()[0]) / 1024.0  # the kernel reports kB
    return out


def _psutil_host_memory(pid: int | None, out: dict[str, float | None]) -> dict[str, float | None]:
    try:
        import psutil

        info = psutil.Process(pid).memory_info()
        out["vm_rss_mb"] = info.rss / MB
        if getattr(info, "peak_wset", None) is not None:  # Windows
            out["vm_hwm_mb"] = info.peak_wset / MB
        elif pid is None:
            import resource

            maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS, kB elsewhere
            out["vm_hwm_mb"] = maxrss / MB if sys.platform == "darwin" else maxrss / 1024.0
    except Exception:  # no psutil, no such process: the readings stay empty
        pass
    return out


def parse_device(device: object) -> tuple[bool, int | None]:
    """``(read the GPU at all, CUDA index or None for the current device)``.

    Accepts None, an index, ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a ``torch.device`` (without importing torch).
    """
    if device is None:
        return True, None
    if isinstance(device, int) and not isinstance(device, bool):
        if device < 0:
            raise ConfigError(f"device: a CUDA index must be >= 0, got {device}")
        return True, device
    kind, _, num = str(device).partition(":")
    if kind == "cpu":
        return False, None
    if kind != "cuda" or (num and not num.isdigit()):
        raise ConfigError(f"device: expected None, an index, 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return True, int(num) if num else None


def cuda_in_use(device: int | None = None) -> int | None:
    """The CUDA index to read (``device``, or the current one), or None when CUDA is not initialized.

    Never imports torch and never initializes CUDA: ``torch.cuda.mem_get_info()`` and friends would
    create a context of several hundred MB just to look.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
        return torch.cuda.current_device() if device is None else device
    except Exception:
        return None


def cuda_stats(index: int) -> dict:
    """``torch.cuda.memory_stats(index)`` (one call serves allocated, reserved and both peaks); {} on error."""
    try:
        return sys.modules["torch"].cuda.memory_stats(index)
    except Exception:
        return {}


class _Nvml:
    """NVML, initialised lazily once per process (NVML state is process-wide anyway).

    If the library or driver is missing, it gives up for good; a failing query leaves that reading empty.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mod = None
        self._failed = False
        self._handles: dict[int, object] = {}

    def read(self, cuda_index: int) -> dict[str, float | None]:
        out: dict[str, float | None] = dict.fromkeys(NVML_KEYS)
        with self._lock:
            if self._failed:
                return out
            try:
                if self._mod is None:
                    import pynvml  # from nvidia-ml-py

                    pynvml.nvmlInit()
                    self._mod = pynvml
            except Exception:
                self._failed = True
                return out
            try:
                handle = self._handles.get(cuda_index)
                if handle is None:
                    handle = self._mod.nvmlDeviceGetHandleByIndex(_nvml_index(cuda_index))
                    self._handles[cuda_index] = handle
                info = self._mod.nvmlDeviceGetMemoryInfo(handle)
                out["nvml_used_mb"], out["nvml_total_mb"] = info.used / MB, info.total / MB
            except Exception:
                pass
        return out


NVML = _Nvml()


def _nvml_index(cuda_index: int) -> int:
    """NVML numbers devices physically, CUDA_VISIBLE_DEVICES renumbers them: let torch map, else identity."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return int(sys.modules["torch"].cuda._get_nvml_device_index(cuda_index))
    except Exception:
        return cuda_index


def read_gpu_memory(device: int | str | None = None) -> dict[str, float | None]:
    """CUDA allocator stats (allocated, reserved, their peaks) and NVML device used/total, in MB.

    All ``None`` unless torch is imported and CUDA initialized. ``device``: see ``parse_device``.
    NVML "used" is the whole device (CUDA context, PyTorch's cache, other processes); "allocated" is
    live tensors, "reserved" what PyTorch's caching allocator holds. The peaks count since the start or
    the last ``reset_peak_memory_stats()``.
    """
    enabled, index = parse_device(device)
    return gpu_reading(enabled, index)


def gpu_reading(enabled: bool, device: int | None) -> dict[str, float | None]:
    """``read_gpu_memory`` for an already parsed device (``parse_device``)."""
    out: dict[str, float | None] = dict.fromkeys(CUDA_KEYS + NVML_KEYS)
    index = cuda_in_use(device) if enabled else None
    if index is None:
        return out
    stats = cuda_stats(index)
    if stats:
        out["cuda_allocated_mb"] = stats.get("allocated_bytes.all.current", 0) / MB
        out["cuda_reserved_mb"] = stats.get("reserved_bytes.all.current", 0) / MB
        out["cuda_max_allocated_mb"] = stats.get("allocated_bytes.all.peak", 0) / MB
        out["cuda_max_reserved_mb"] = stats.get("reserved_bytes.all.peak", 0) / MB
    out.update(NVML.read(index))
    return out
