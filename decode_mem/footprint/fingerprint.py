"""What names a remembered trace or timing: the network code's fingerprint, and the traces kept per machine.

Without torch: a run that reads its plan from the tables (``footprint.cache``) looks these up and traces nothing
(``trace`` holds the tracing itself, which needs torch).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from decode_mem.footprint.cache import cache_path, read_table, remember
from decode_mem.torch_facts import torch_version


def trace_cache_path() -> Path:
    """Traced working sets, remembered per machine like the timings (``$DECODE_MEM_CACHE``'s folder): a trace
    costs seconds (torch's fake-tensor machinery is imported and the network run on fake tensors), a lookup none."""
    return cache_path().with_name("traced_memory.json")


NETWORK_CODE = ("decode_mem.model", "decode_mem.tiling")  # the packages whose code decides a unit's memory and speed


def source_fingerprint(packages: tuple[str, ...] | None = None) -> str:
    """A short hash of the Python sources of ``packages``: a remembered trace or timing is reused only by the code
    that made it (an in-place activation changes the memory of the same architecture). Default: ``NETWORK_CODE``.
    The files are hashed again only where one changed (its size or modification time): a plan looks the
    fingerprint up for every candidate."""
    files = []
    for name in packages or NETWORK_CODE:
        spec = importlib.util.find_spec(name)
        folders = list(spec.submodule_search_locations or []) if spec else []
        for folder in map(Path, folders):
            for path in sorted(folder.rglob("*.py")):
                stat = path.stat()
                files.append((name, str(folder), path.relative_to(folder).as_posix(), stat.st_mtime_ns, stat.st_size))
    return _fingerprint(tuple(files))


@functools.lru_cache(maxsize=8)
def _fingerprint(files: tuple[tuple[str, str, str, int, int], ...]) -> str:
    digest = hashlib.sha1()
    for name, folder, relative, _, _ in files:
        digest.update(f"{name}/{relative}".encode())
        digest.update((Path(folder) / relative).read_bytes())
    return digest.hexdigest()[:12]


def remember_receptive_field(net: Any) -> None:
    """Have ``net`` take the receptive field remembered for its architecture and code (``remembered_trace``), measured
    and remembered where none is: the probe runs once per machine, architecture and version of the network code."""
    if hasattr(net, "assume_receptive_field"):
        net.assume_receptive_field(remembered_trace(net, ["receptive_field"], lambda: int(net.receptive_field())))


def remembered_trace(net: Any, what: list[Any], trace: Callable[[], Any]) -> Any:
    """``trace()`` (traced peaks in bytes, JSON), remembered under the network's architecture, ``what`` was traced,
    torch's version and the network code's ``source_fingerprint``. A network without a ``config.to_dict()`` is
    traced every time."""
    arch = net.config.to_dict() if hasattr(net, "config") and hasattr(net.config, "to_dict") else None
    if arch is None:
        return trace()
    key = json.dumps([arch, what, torch_version(), source_fingerprint()], sort_keys=True, default=str)
    known = read_table(trace_cache_path())
    if key in known:
        return known[key]
    peak = trace()
    remember(trace_cache_path(), {key: peak})  # a read-only home: plan without remembering
    return peak
