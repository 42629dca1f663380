"""torch's CPU threads on a shared machine: OpenMP's wait policy and, where that came too late, the thread count.

torch's OpenMP runtime (libgomp) reads ``OMP_WAIT_POLICY`` once, when torch is loaded. Left unset, its idle
threads spin at every barrier; on a machine whose cores are busy with other work the spinning threads take turns
with the working ones, and the library ran several times slower than the command line
(``benchmarks/results/library_speed.md``). So ``import decode_mem`` asks for ``PASSIVE`` (idle threads sleep)
when torch is not loaded yet — a user's own ``OMP_WAIT_POLICY`` is kept. That is the one thing decided at import
time: later would be too late. Where torch was loaded first (a notebook that imports torch, then decode_mem),
the policy is fixed already; then ``cpu_threads`` runs the library's work on as many threads as the machine has
idle cores (at least 1: a single thread has no barrier to spin at), measured when the work starts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

M_ARENA_MAX = -8  # glibc's mallopt parameter: the most malloc arenas (per-thread heaps) a process makes
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
# bytes: the most glibc's dynamic mmap threshold grows to on 64-bit Linux (its DEFAULT_MMAP_THRESHOLD_MAX), and the
# trim threshold it pairs with it there; the memory plan counts blocks up to MMAP_THRESHOLD as heap
MMAP_THRESHOLD = 32 * 2**20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD


def _prefer_passive_wait() -> bool:
    """Ask for sleeping idle OpenMP threads if torch is not loaded yet; whether torch's threads sleep."""
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return os.environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE"


WAITS_PASSIVELY = _prefer_passive_wait()  # a fact fixed when torch loads; see the module docstring


def idle_cores(interval: float = 0.1) -> float:
    """Cores of this process's CPU set not used by other processes, measured over ``interval`` seconds."""
    import psutil

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    busy = psutil.cpu_percent(interval=interval) / 100 * (psutil.cpu_count() or cores)
    return max(0.0, min(cores, cores - busy))


def auto_threads(requested: int | None, passive: bool | None = None) -> int | None:
    """The thread count for a piece of work: ``requested`` if given; None (torch's, unchanged) where idle
    threads sleep; else the idle cores, at least 1 and at most torch's current count."""
    if requested is not None:
        return requested
    if WAITS_PASSIVELY if passive is None else passive:
        return None
    import torch

    return max(1, min(torch.get_num_threads(), int(idle_cores() + 0.5)))


@contextmanager
def cpu_threads(requested: int | None) -> Iterator[int]:
    """Run the block with ``auto_threads(requested)`` torch threads, then restore the count; yields the count."""
    import torch

    before = torch.get_num_threads()
    n = auto_threads(requested)
    if n is None or n == before:
        yield before
        return
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)


@functools.cache
def libc() -> Any | None:
    """The C library (``ctypes.CDLL``), None where it cannot be found or loaded."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def limit_malloc_arenas(count: int = 1) -> bool:
    """Have glibc's malloc keep at most ``count`` arenas in this process, as ``MALLOC_ARENA_MAX`` would (left to
    the environment where that is set). Each thread that allocates beside another gets an arena of its own (up to
    8 per core), and each arena keeps freed memory of its own: the writer, reader and timing threads of a run
    held tens of MiB beyond the plan that way (``benchmarks/results/malloc_arenas.md``: with one arena the first
    2048² run stayed within its budget, at the same speed). For a program's entry (``cli.run``), before its
    threads start; arenas made before stay. Where applied, ``MALLOC_ARENA_MAX`` is set too, so that the processes
    it starts (dask workers) have the same cap from their start. Whether it was applied (False without glibc)."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    lib = libc()
    mallopt = getattr(lib, "mallopt", None) if lib is not None else None
    if mallopt is None or not mallopt(M_ARENA_MAX, int(count)):
        return False
    os.environ["MALLOC_ARENA_MAX"] = str(int(count))
    return True


def fix_malloc_thresholds() -> bool:
    """Have glibc's malloc serve blocks up to 32 MiB from its heap from the start, as it does once its dynamic mmap
    threshold has grown to its maximum (and keep up to 64 MiB free at the heap's top, as it then does).

    Left to itself glibc maps every block above 128 KiB afresh (page faults and zeroing at each network call)
    until a large enough block is freed; whether and when that happens depended on the run: a run whose planner
    timed its candidates grew it at once, a resumed or re-run stack (sizes from the journal or the plan cache) did
    not (two resumes of one killed 90 % state of a 256² movie each way, timed by hand: 11-13 s of system time
    against 6.4, minor faults 3.7-4.4 M against 1.7-1.8 M; on CSV-only runs ``benchmarks/results/
    malloc_threshold.md`` found no consistent difference). The memory plan counts blocks up to this size as heap
    already (``MMAP_THRESHOLD``). Left to the environment where
    ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` is set, and to glibc's own dynamic threshold where
    ``DECODE_MEM_MMAP_THRESHOLD=dynamic`` (``benchmarks/bench_malloc_threshold.py`` compares the two); where
    applied, both are set too, for the processes it starts (dask workers). For a program's entry (``cli.run``).
    Whether it was applied (False without glibc)."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or os.environ.get("MALLOC_TRIM_THRESHOLD_"):
        return False
    if os.environ.get("DECODE_MEM_MMAP_THRESHOLD", "").strip().lower() == "dynamic":
        return False
    lib = libc()
    mallopt = getattr(lib, "mallopt", None) if lib is not None else None
    if mallopt is None or not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD,
                                                                                    TRIM_THRESHOLD)):
        return False
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)
    os.environ["MALLOC_TRIM_THRESHOLD_"] = str(TRIM_THRESHOLD)
    return True
