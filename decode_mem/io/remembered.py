"""Where measurements made on this machine are remembered: one folder (``$DECODE_MEM_CACHE``'s, or
``~/.cache/decode_mem``) of small JSON tables keyed by what was measured and on what machine, written atomically.
A read-only home only means a measurement is not remembered. (The planner's tables: ``footprint.cache``.)"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from decode_mem.io.atomic import atomic_output


def cache_path() -> Path:
    """The timings table; the other tables lie beside it."""
    return Path(os.environ.get("DECODE_MEM_CACHE") or Path.home() / ".cache" / "decode_mem" / "throughput.json")


def read_table(path: Path) -> dict[str, Any]:
    """A remembered table ({} where there is none or it cannot be read), a copy the caller may change. Parsed once
    per version of the file (its inode, size and modification time: tables are replaced whole, ``remember``): a
    plan looks entries up for every candidate."""
    try:
        stat = path.stat()
    except OSError:
        return {}
    return dict(_parsed(str(path), stat.st_ino, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=16)
def _parsed(path: str, inode: int, mtime_ns: int, size: int) -> dict[str, Any]:
    try:
        table = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def remember(path: Path, entries: dict[str, Any]) -> None:
    """Add ``entries`` to the table at ``path``, written once (nothing where it cannot be written)."""
    table = read_table(path)
    table.update(entries)
    rewrite(path, table)


def rewrite(path: Path, table: dict[str, Any]) -> None:
    """Write ``table`` whole at ``path`` (nothing where it cannot be written)."""
    try:
        with atomic_output(path) as tmp:
            tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
    except OSError:  # a read-only home: the measurement is still used, just not remembered
        pass
