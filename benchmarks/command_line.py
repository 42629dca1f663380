"""The command line a benchmark report records: the script as run from the repository root, with its real
arguments, quoted so that it can be pasted into a shell."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def command_line(argv: list[str] | None = None) -> str:
    """``python benchmarks/<script> <arguments>``: ``argv`` (default ``sys.argv[1:]``) after the running script."""
    script = Path(sys.argv[0]).name
    return shlex.join(["python", f"benchmarks/{script}", *(sys.argv[1:] if argv is None else argv)])


def library_commit() -> str:
    """The git commit of the ``decode_mem`` package this process imported (``+ changes`` when its tree differs
    from it): a benchmark run against another checkout (``PYTHONPATH``) records which."""
    import subprocess

    import decode_mem

    where = Path(decode_mem.__file__).resolve().parent
    commit = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--", "."], capture_output=True,
                           text=True).stdout.strip()
    return f"{commit or 'unknown'}{' + changes' if dirty else ''}"
