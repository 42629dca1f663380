"""Hand freed heap back to the OS after a transient phase (glibc only; elsewhere nothing happens).

glibc keeps freed blocks below its mmap threshold in the heap (32 MiB from the start in every CLI:
``threads.fix_malloc_thresholds``; elsewhere glibc raises it to that as large blocks are freed). Timing a candidate's
unit of work therefore leaves most of its working set in the process's RssAnon once it is freed, and a run that
follows carries it to its end (``tests/plan/test_plan.py`` measures it). ``malloc_trim`` returns the free pages.
"""

from __future__ import annotations

from collections.abc import Callable

from decode_mem.threads import libc


def release_free_heap() -> bool:
    """Return the heap's free pages to the OS (``malloc_trim(0)``); False where there is no glibc."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``; None without it (musl, macOS)."""
    return getattr(libc(), "malloc_trim", None)
