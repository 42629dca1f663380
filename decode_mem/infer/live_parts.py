"""The localizations of a stack in progress as complete part files: ``<out>/<stem>.live/`` while a followed stack
grows (``--follow``), ``<out>/<stem>.progress/`` while an offline run goes (its journal: ``--resume`` after a kill
or a stop continues after the last part, and the final files are rebuilt from the parts).

Every ``refresh`` seconds the emitters of the frames done since the last part are closed as one part: one file
per requested format (``part-00003.csv``, ``.hdf5`` + ``.yaml``, ``.parquet``), each written under a temporary name
and renamed when complete, so a reader that opens a part mid-run always gets a valid file (a parquet reader can
open the folder as one dataset). The parquet part is always written: it holds the engine's float32 values
exactly (float64 in the file), so the final files, written from the parts when the acquisition ends, are those
of one uninterrupted run, and ``--resume`` after a kill continues after the last part in ``parts.json``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from decode_mem.errors import StackError
from decode_mem.infer.config import SUFFIXES
from decode_mem.io.atomic import atomic_output, remove_path, sync_to_disk
from decode_mem.io.localizations import iter_localizations, open_writer
from decode_mem.io.table import EmitterTable

MANIFEST = "parts.json"


def summary_complete(path: Path) -> bool:
    """Is ``<stem>.json`` the summary of a finished stack (a followed run refreshes it with ``"status":
    "running"`` while it goes, and leaves ``"stopped"`` after a stop)?"""
    if not path.is_file():
        return False
    try:
        return json.loads(path.read_text()).get("status") not in ("running", "stopped")
    except (OSError, ValueError):
        return False


def live_dir(out: str | os.PathLike, stem: str) -> Path:
    """``<out>/<stem>.live``: the parts of a followed stack (removed once the final files are written)."""
    return Path(out) / f"{stem}.live"


def progress_dir(out: str | os.PathLike, stem: str) -> Path:
    """``<out>/<stem>.progress``: the journal of an offline run's stack (removed once its ``<stem>.json`` is
    written)."""
    return Path(out) / f"{stem}.progress"


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The ``parts.json`` of a parts folder, or None where there is none (or it cannot be read)."""
    try:
        return json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


class LiveParts:
    """``write(table)`` appends to the open part; ``close_part(stop)`` closes it (frames up to ``stop``)."""

    def __init__(self, out: str | os.PathLike, stem: str, formats: tuple[str, ...], *, block: int,
                 common: dict[str, Any], picasso: dict[str, Any], folder: Path | None = None) -> None:
        self.dir = live_dir(out, stem) if folder is None else Path(folder)
        self.formats = tuple(dict.fromkeys(("parquet", *formats)))
        self.block, self.common, self.picasso = int(block), common, picasso
        self.parts: list[dict[str, Any]] = []
        self.meta: dict[str, Any] = {}  # what the run that wrote the parts records beside them (``begin``)
        self.start = 0
        self._writers: ExitStack | None = None
        self._open: list[Any] = []
        self._rows = 0

    @property
    def manifest(self) -> Path:
        return self.dir / MANIFEST

    def begin(self, resume: bool, meta: dict[str, Any] | None = None) -> int:
        """Start afresh, or with ``resume`` keep the parts a killed run finished; returns the first frame to do.
        ``meta`` is recorded in ``parts.json`` when starting afresh; a resumed run finds the first run's in
        ``self.meta`` (the caller compares)."""
        if resume and self.manifest.is_file():
            state = json.loads(self.manifest.read_text())
            self.parts, self.block = state["parts"], int(state["block"])
            self.meta = state.get("meta", {})
            keep = {MANIFEST} | {Path(f).name for p in self.parts for f in p["files"]}
            for path in self.dir.iterdir():  # a part the kill interrupted, or one closed after the manifest
                if path.name not in keep:
                    remove_path(path)
            self.start = self.parts[-1]["stop"] if self.parts else 0
            return self.start
        remove_path(self.dir)
        self.dir.mkdir(parents=True)
        self.meta = dict(meta or {})
        self._save()
        return 0

    def write(self, table: EmitterTable) -> None:
        if self._writers is None:
            self._writers = ExitStack()
            k = len(self.parts)
            for fmt in self.formats:
                path = self.dir / f"part-{k:05d}{SUFFIXES[fmt][0]}"
                options = self.picasso if fmt == "picasso" else {}
                self._open.append(self._writers.enter_context(open_writer(path, **self.common, **options)))
        for writer in self._open:
            writer.write(table)
        self._rows += len(table)

    def close_part(self, stop: int, outputs: dict[str, Any] | None = None) -> None:
        """Close the open part as frames ``start .. stop-1`` and record it in ``parts.json``, with ``outputs``: the
        final files' state at ``stop`` (``ThunderstormWriter.checkpoint``, by file name), for a resumed run."""
        if stop <= self.start:
            return
        files: list[str] = []
        if self._writers is not None:
            self._writers.close()  # each file renamed to its final name
            files = [p.name for w in self._open for p in (w.path, getattr(w, "yaml_path", None)) if p is not None]
            sync_to_disk(*(self.dir / name for name in files))  # on disk before parts.json names them
        self.parts.append({"start": self.start, "stop": int(stop), "localizations": self._rows, "files": files,
                           **({"outputs": outputs} if outputs else {})})
        self.start, self._writers, self._open, self._rows = int(stop), None, [], 0
        self._save()

    def abort(self) -> None:
        """Drop the open part's temporary files (an error mid-part)."""
        if self._writers is not None:
            self._writers.__exit__(StackError, StackError("aborted"), None)
            self._writers, self._open, self._rows = None, [], 0

    def _save(self) -> None:
        state = {"block": self.block, "parts": self.parts, "stop": self.start, "meta": self.meta}
        with atomic_output(self.manifest) as tmp:
            tmp.write_text(json.dumps(state, indent=1) + "\n")
            sync_to_disk(tmp)
        sync_to_disk(self.dir)  # the renames (the parts' and parts.json's) survive a power cut too

    def tables(self) -> Iterator[EmitterTable]:
        """Every part's emitters, in frame order, exactly as the engine gave them (from the parquet parts)."""
        for part in self.parts:
            yield from self.part_tables(part)

    def part_tables(self, part: dict[str, Any]) -> Iterator[EmitterTable]:
        """One closed part's emitters (from its parquet file)."""
        for name in part["files"]:
            if name.endswith(".parquet"):
                yield from iter_localizations(self.dir / name)

    def remove(self) -> None:
        remove_path(self.dir)
