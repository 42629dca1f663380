"""A stack's domain check remembered on this machine, so that a repeat run on the same file with the same model
and camera reads it instead of calibrating the first frames again (1-2 s on a CPU: most of a repeat run's fixed
cost on a short movie).

The check is a function of the frames it reads, the camera, the model (its envelope and PSF: the checkpoint's
SHA-256) and the code that checks; the key holds each: the file by its resolved path, size and modification time
(what ``make`` trusts; a file written again is checked again), the options it is opened with, and
``trace.source_fingerprint`` of the calibration and of ``infer``. ``domain.json`` lies beside the planner's
tables (``footprint.cache``), holding the ``KEEP`` latest checks. A check read back says so in its numbers
(``remembered``: true, in ``<stem>.json``'s ``domain``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from decode_mem.footprint.cache import cache_path, read_table, rewrite
from decode_mem.footprint.fingerprint import source_fingerprint
from decode_mem.infer.domain import DomainCheck

KEEP = 64  # checks remembered (the oldest go first)
CODE = ("decode_mem.calibrate", "decode_mem.infer")  # what a check's verdict depends on besides its inputs


def domain_path() -> Path:
    return cache_path().with_name("domain.json")


def domain_key(path: str | os.PathLike, options: dict[str, Any], camera: dict[str, Any], model_sha: str,
               shape: tuple[int, ...], dtype: Any) -> str | None:
    """The key of a stack's check (module docstring); None where the file cannot be stat'ed."""
    try:
        stat = Path(path).stat()
        where = str(Path(path).resolve())
    except OSError:
        return None
    text = json.dumps({"file": where, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "options": options,
                       "camera": camera, "model": model_sha, "shape": [int(v) for v in shape], "dtype": str(dtype),
                       "code": source_fingerprint(CODE)}, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()


def as_record(domain: DomainCheck) -> dict[str, Any]:
    """A check as JSON keeps it (``from_record`` reads it back)."""
    return json.loads(json.dumps({"warnings": list(domain.warnings), "numbers": domain.numbers,
                                  "camera_suspect": domain.camera_suspect, "psf_mismatch": domain.psf_mismatch},
                                 default=str))


def from_record(d: dict[str, Any]) -> DomainCheck:
    return DomainCheck(tuple(d["warnings"]), d["numbers"], bool(d["camera_suspect"]), bool(d["psf_mismatch"]))


def remembered_check(key: str | None, check: Callable[[], DomainCheck]) -> DomainCheck:
    """The check remembered under ``key``, else ``check()`` (remembered where it can be written)."""
    if key is None:
        return check()
    table = read_table(domain_path())
    entry = table.get(key)
    if isinstance(entry, dict) and isinstance(entry.get("check"), dict):
        try:
            found = from_record(entry["check"])
            return dataclasses.replace(found, numbers={**found.numbers, "remembered": True})
        except (KeyError, TypeError):
            pass  # a table another version wrote: checked again below
    found = check()
    table[key] = {"at": time.time(), "check": as_record(found)}
    newest = sorted(table, key=lambda k: -float(table[k].get("at", 0)) if isinstance(table[k], dict) else 0.0)
    rewrite(domain_path(), {k: table[k] for k in newest[:KEEP]})
    return found
