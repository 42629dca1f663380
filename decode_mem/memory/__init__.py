"""Memory observation: host and GPU readings, per-phase peaks, a bounded history, a CSV log and a leak check.

Host memory comes from ``/proc/self/status`` (psutil where there is no /proc, e.g. macOS: VmRSS only).
**RssAnon** is the number to watch: the pages of a memmapped stack are file-backed (RssFile) and count
in VmRSS although the kernel can drop them (DESIGN.md §4). GPU memory is read only where CUDA is
already in use (``"torch" in sys.modules`` and ``torch.cuda.is_initialized()``), so observing never
creates a CUDA context; NVML (``nvidia-ml-py``, module ``pynvml``) gives the whole device's usage,
other processes included. An unavailable reading is ``None`` (an empty CSV cell), never an error.

MB means MiB (2**20 bytes) throughout. Nothing here calls ``torch.cuda.empty_cache()`` or ``gc.collect()``::

    tracker = MemoryTracker("memory_log.csv", log_interval=10)
    for step, batch in enumerate(loader):
        ...
        tracker.update(step=step, phase="train")
    with tracker.phase("validation") as peak:
        validate()
    print(peak.rss_anon_mb, peak.cuda_max_allocated_mb)
    tracker.check_leak()            # warns MemoryLeakWarning on a steady climb
    tracker.plot_history("memory.png")
    print(tracker.report())
"""

from decode_mem.memory.leak import LeakReport, LeakTrend, MemoryLeakWarning
from decode_mem.memory.peaks import PeakSampler, PhasePeak, ProcessPeak, measure_phase, reset_vm_hwm
from decode_mem.memory.readings import (
    CUDA_KEYS,
    HOST_KEYS,
    MB,
    NVML_KEYS,
    READING_KEYS,
    read_gpu_memory,
    read_host_memory,
)
from decode_mem.memory.tracker import CSV_COLUMNS, MemoryTracker

__all__ = [
    "CSV_COLUMNS", "CUDA_KEYS", "HOST_KEYS", "MB", "NVML_KEYS", "READING_KEYS",
    "LeakReport", "LeakTrend", "MemoryLeakWarning", "MemoryTracker", "PeakSampler", "PhasePeak", "ProcessPeak",
    "measure_phase", "read_gpu_memory", "read_host_memory", "reset_vm_hwm",
]
