"""The network's host working set as measured on this machine, against its fake-tensor trace.

The trace (``footprint.trace``) counts the tensors a unit of work holds; on a CPU the kernels hold more than their
tensors: oneDNN's scratchpads and reordered weights, bf16 copies, and glibc's heap between calls. How much more
depends on the CPU and the precision: on a 2-core Xeon with AMX, torch 2.13 in bf16 held 1.2-1.4x its trace at
512² (``benchmarks/results/formats.md``: the plan command's line; its runs before this measurement missed their plans
by up to 27 %), where the planner's factors had been fitted with the trace alone on an AMD EPYC. So every
unit of work timed on a CPU (``speed.time_unit``) also measures its peak RssAnon, and the ratio to its trace is
remembered per machine, precision and network code; plans made there after it (this run's too: ``choose`` plans
again) use the largest ratio measured, where it exceeds the default (``inference.EMULATED_BF16`` or 1). Where VmHWM
cannot be reset, nothing is measured and the default stays.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from decode_mem.footprint.cache import cache_path, device_name, read_table, remember
from decode_mem.footprint.fingerprint import source_fingerprint
from decode_mem.memory import measure_phase
from decode_mem.torch_facts import torch_version

MiB = float(2**20)


def working_set_path() -> Path:
    return cache_path().with_name("working_set.json")


def ratio_key(device: Any, amp: str) -> str:
    return f"{device_name(device)}|torch {torch_version()}|{amp}|code {source_fingerprint()}"


def remembered_ratio(device: Any, amp: str) -> float | None:
    """The largest working set / trace ratio measured on this machine at ``amp`` (the executor's name), or None."""
    if device.type != "cpu":
        return None
    value = read_table(working_set_path()).get(ratio_key(device, amp))
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def measure_ratio(run: Callable[[], object], traced_bytes: int, device: Any, amp: str) -> float | None:
    """Run ``run`` (one unit of work, not carried: what the trace counts) with VmHWM reset; its peak RssAnon above
    the start over ``traced_bytes``, remembered where it is the largest so far. None where it cannot be measured
    (VmHWM not reset exactly, or the peak no higher than the start)."""
    if device.type != "cpu" or traced_bytes <= 0:
        return None
    with measure_phase("unit", interval=None, device="cpu") as phase:
        run()
    if not phase.hwm_exact or phase.anon_hwm_mb is None or phase.rss_anon_start_mb is None:
        return None
    ratio = round((phase.anon_hwm_mb - phase.rss_anon_start_mb) * MiB / traced_bytes, 4)  # as remembered
    if ratio <= 0:  # the unit fit in memory the heap already held (a long-lived process): nothing measured
        return None
    known = remembered_ratio(device, amp)
    if known is None or ratio > known:
        remember(working_set_path(), {ratio_key(device, amp): ratio})
    return ratio
