"""The machine and the commit a benchmark report records, written one way for every script: the CPU (model,
cores, the vector flags torch's kernels use), torch threads, the 1-min load average, python and torch, and the
``decode_mem`` commit measured. A script adds what only it depends on (a GPU, Picasso, dask) after the line."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")  # the ones that change torch's CPU speed (bf16 included)


def cpu_name() -> str:
    """``<model>, <N> cores (<flags>)`` from /proc/cpuinfo (the platform's machine name where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "")
    flags = ", ".join(f for f in FLAGS if f" {f}" in text)
    return f"{model or platform.machine()}, {os.cpu_count()} cores ({flags})"


def commit(checkout: str | os.PathLike | None = None) -> str:
    """The git commit of the ``decode_mem`` package this process imported, or of another ``checkout`` (a baseline
    a benchmark compares with), ``+ changes`` when its tree differs from it: a benchmark run against another
    checkout (``PYTHONPATH``) records which. Read it when a run starts: HEAD may move while a long run goes on."""
    if checkout is None:
        import decode_mem

        where = Path(decode_mem.__file__).resolve().parent
    else:
        where = Path(checkout)
    head = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--", "."], capture_output=True,
                           text=True).stdout.strip()
    return f"{head or 'unknown'}{' + changes' if dirty else ''}"


def checkout(rev: str, where: str | os.PathLike, root: str | os.PathLike | None = None) -> str:
    """``rev``'s committed tree extracted in ``where`` (git archive: committed files only); returns its short hash.
    ``root``: the repository (default: the one this file is in)."""
    root = Path(root) if root is not None else Path(__file__).resolve().parents[1]
    where = Path(where)
    where.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(root), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", rev], check=True, capture_output=True,
                          text=True).stdout.strip()


def load_average() -> float:
    """The 1-min load average now (other jobs on a shared machine slow every timing)."""
    return os.getloadavg()[0]


def machine_line(threads: int | str, *, load_start: float | None = None, at: str | None = None,
                 gpu: str | None = None) -> str:
    """``<cpu_name()>; <threads> torch thread(s)[; GPU <gpu>]; 1-min load average <start> at the start, <now> at
    the end; python <v>, torch <v>; decode_mem at <commit>``.

    ``threads``: a count, or words (``"1 per process"``); ``load_start``: ``load_average()`` read when the run
    started (without it, only the end's); ``at``: ``commit()`` read when the run started (default: now)."""
    import torch

    count = f"{threads} torch thread{'' if threads == 1 else 's'}" if isinstance(threads, int) else threads
    now = load_average()
    load = f"1-min load average {load_start:.2f} at the start, {now:.2f} at the end" if load_start is not None \
        else f"1-min load average {now:.2f} at the end"
    return (f"{cpu_name()}; {count}{f'; GPU {gpu}' if gpu else ''}; {load}; python {platform.python_version()}, "
            f"torch {torch.__version__}; decode_mem at {at or commit()}")
