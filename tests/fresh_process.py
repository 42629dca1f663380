"""Run one check of a test module in a fresh Python process.

For checks that start DataLoader worker processes: torch then handles SIGCHLD in Python for the rest of the
process, and in the full suite (not alone, not in any subset tried) the test process died with SIGSEGV (si_code
SI_KERNEL, the main thread in ``waitpid``: the kernel could not deliver that signal) when the first of those
workers exited — three runs of three on 2026-11-27, fork and spawn workers alike. A fresh interpreter holds only
what the check itself loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run_check(module_file: str, name: str, timeout: float = 300) -> None:
    """Call ``name`` (a function of the module at ``module_file``) in a new interpreter; fail with its output."""
    code = f"import runpy; runpy.run_path({str(Path(module_file).resolve())!r})[{name!r}]()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          cwd=Path(__file__).parent)  # tests/: the helpers the test modules import
    assert done.returncode == 0, f"{name} failed in a fresh process (exit {done.returncode}):\n{done.stderr[-3000:]}"
