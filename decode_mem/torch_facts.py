"""What a run needs to know about torch without importing it: its version, whether it could use a GPU, its threads.

Importing torch takes about a second of a short run (``docs/developers.md``); a run whose network a CPU runtime
computes (OpenVINO) needs torch for none of its work, only for a few facts that name its caches. They are read here
from torch's own files, or remembered from a process that had torch loaded, and torch is imported only where
neither answers.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from decode_mem.io.remembered import cache_path, read_table, remember

THREADS_TABLE = "torch_threads.json"  # beside the planner's tables (``io.remembered``)


@cache
def _version_file() -> dict[str, str | None]:
    """``torch/version.py``'s assignments (``__version__``, ``cuda``, ``hip``), read as text; {} without torch."""
    spec = importlib.util.find_spec("torch")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    try:
        text = (Path(folders[0]) / "version.py").read_text()
    except (IndexError, OSError):
        return {}
    found: dict[str, str | None] = {}
    for name in ("__version__", "cuda", "hip"):
        m = re.search(rf"^{name}\s*(?::[^=]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|(None))\s*$", text, re.MULTILINE)
        if m:
            found[name] = m.group(1) if m.group(1) is not None else m.group(2)
    return found


def torch_version() -> str:
    """``torch.__version__``: torch's own if it is loaded, else the same string from its ``version.py``."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    version = _version_file().get("__version__")
    if version is None:
        import torch

        return str(torch.__version__)
    return version


def cpu_only_torch() -> bool:
    """True where the installed torch is a build for the CPU only (its ``version.py`` names no CUDA or ROCm):
    ``torch.cuda.is_available()`` is then False whatever the machine has."""
    facts = _version_file()
    return bool(facts) and "cuda" in facts and "hip" in facts and facts["cuda"] is None and facts["hip"] is None


@dataclass(frozen=True)
class HostDevice:
    """The CPU as a run that does not load torch names its device: what it reads of ``torch.device('cpu')`` (its
    ``type``, its ``index`` and its name)."""

    type: str = "cpu"
    index: int | None = None

    def __str__(self) -> str:
        return self.type


HOST = HostDevice()


def device_type(name: Any = "auto") -> str:
    """``config.resolve_device(name).type`` ('cpu' or 'cuda') without importing torch where a CPU-only build
    answers for 'auto' and 'cpu'; other names ask torch (a ConfigError where CUDA is asked for and absent)."""
    if name is None or name == "auto":
        if cpu_only_torch():
            return "cpu"
    elif str(name) == "cpu":
        return "cpu"
    from decode_mem.config import resolve_device

    return resolve_device(name).type


def as_device(device: Any) -> Any:
    """``torch.device(device)`` (not checked against the machine), except the CPU where torch is not loaded: ``HOST``
    (what a run whose network a runtime computes reads of its device: ``type``, ``index``, its name)."""
    if isinstance(device, HostDevice):
        return device
    if "torch" not in sys.modules and str(device) == "cpu":
        return HOST
    import torch

    return torch.device(device)


def run_device(device: Any) -> Any:
    """``config.resolve_device(device)`` ('auto': CUDA where there is one; CUDA asked for and absent: a ConfigError),
    except the CPU where torch is not loaded: ``HOST``."""
    if isinstance(device, HostDevice):
        return device
    if "torch" not in sys.modules and device_type(device) == "cpu":
        return HOST
    from decode_mem.config import resolve_device

    return resolve_device(device)


def _threads_key() -> str:
    """What torch's default thread count depends on: the CPUs this process may use and the environment."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    env = ",".join(f"{k}={os.environ.get(k, '')}" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"))
    return f"{os.cpu_count()} cpus, {cpus} usable|{env}|torch {torch_version()}"


def _threads_path() -> Path:
    return cache_path().with_name(THREADS_TABLE)


def torch_threads() -> int:
    """``torch.get_num_threads()``: torch's if it is loaded (remembered for this machine and environment), else the
    count a process with torch loaded remembered, else torch's after importing it."""
    torch = sys.modules.get("torch")
    if torch is None:
        known = read_table(_threads_path()).get(_threads_key())
        if isinstance(known, int) and known > 0:
            return known
        import torch
    n = int(torch.get_num_threads())
    if read_table(_threads_path()).get(_threads_key()) != n:
        remember(_threads_path(), {_threads_key(): n})
    return n
