"""The command line a benchmark report records: the script as run from the repository root, with its real
arguments, quoted so that it can be pasted into a shell (the machine and commit: ``machine.py``)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def command_line(argv: list[str] | None = None) -> str:
    """``python benchmarks/<script> <arguments>``: ``argv`` (default ``sys.argv[1:]``) after the running script."""
    script = Path(sys.argv[0]).name
    return shlex.join(["python", f"benchmarks/{script}", *(sys.argv[1:] if argv is None else argv)])

