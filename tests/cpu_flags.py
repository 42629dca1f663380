"""This machine's CPU flags as Linux lists them, read independently of the library's own probes (the tests that
hold a probe or a runtime's choice against the flags)."""

from __future__ import annotations


def cpu_flags() -> set[str] | None:
    """The ``flags`` of ``/proc/cpuinfo``; None where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as fh:
            return set(next((line for line in fh if line.startswith("flags")), "").split())
    except OSError:
        return None
