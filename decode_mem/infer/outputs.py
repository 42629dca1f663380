"""The files of one stack: streaming localization writers, then the JSON summary, written last.

The writers run in a thread of their own behind a queue of ``WRITE_QUEUE_BLOCKS`` blocks (``WriteBehind``):
``write`` returns at once while the queue has room, so the loop that feeds the device does not wait for text
formatting, compression or the disk.

Every file is written under a ``.partial`` name and renamed when complete (the writers in
``decode_mem.io`` do this); the JSON summary is renamed last, so its presence means that every other
output of the stack is complete: ``--resume`` skips exactly the stacks that have one.

With a journal (``journal=True``, what ``run_inference`` uses) every block's emitters also go to parquet parts in
``<stem>.progress/`` (``LiveParts``): a part is closed at the first block boundary ``JOURNAL_SECONDS`` after the
last, and at a stop. A run killed or stopped midway leaves its closed parts; the resumed run replays them into
fresh writers (``replay``: in the writer thread, in front of the first new block, while the network computes the
next ones) and goes on from the first frame they do not cover, so every file is that of one uninterrupted run.
The parts hold the engine's float32 values exactly (parquet float64). The CSV, a plain append-only file, is not
rebuilt: each part records its length then (synced to disk first), and the resumed run cuts the killed run's
temporary file back to it and appends (``ThunderstormWriter.continue_from``); HDF5 and parquet files are whole
only once closed, so they are replayed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from decode_mem.infer.config import JOURNAL_SECONDS, SUFFIXES
from decode_mem.infer.live_parts import LiveParts, progress_dir
from decode_mem.infer.probmap import ProbabilityMap
from decode_mem.io.atomic import atomic_output, partial_path, remove_path
from decode_mem.io.localizations import open_writer
from decode_mem.io.table import EmitterTable
from decode_mem.io.write_behind import WriteBehind

EXTRAS_2D = ("prob", "sigma_x", "sigma_y", "sigma_photons")
EXTRAS_3D = ("prob", "sigma_x", "sigma_y", "sigma_z", "sigma_photons")
WRITE_QUEUE_BLOCKS = 4  # blocks of emitters waiting for the writers at most (a 256-frame block of 256² frames
# with ~600 emitters each is ~7 MB)


@dataclass(frozen=True)
class _Item:
    """What the writer thread takes: a block's emitters up to frame ``stop`` (``journal``: into the journal too),
    with ``table`` None a request to close the journal's part (``force``: now), or ``replay``: the journal's
    closed parts, to every file."""

    table: EmitterTable | None
    stop: int | None = None
    journal: bool = True
    force: bool = False
    replay: bool = False


def summary_path(out: str | os.PathLike, stem: str) -> Path:
    """``<out>/<stem>.json``: present only for a stack whose outputs are all complete."""
    return Path(out) / f"{stem}.json"


def prob_map_path(out: str | os.PathLike, stem: str) -> Path:
    """``<out>/<stem>_prob.zarr``: the detection probability map (``--prob_map``)."""
    return Path(out) / f"{stem}_prob.zarr"


def output_paths(out: str | os.PathLike, stem: str, formats: tuple[str, ...]) -> list[Path]:
    """Every output a stack can produce for ``formats`` (and the probability map), the JSON summary last."""
    paths = [Path(out) / f"{stem}{s}" for f in formats for s in SUFFIXES[f]]
    return [*paths, prob_map_path(out, stem), summary_path(out, stem)]


def remove_partials(out: str | os.PathLike, stem: str, formats: tuple[str, ...]) -> None:
    """Drop what a killed run left under temporary names (never an output under its final name) and its journal."""
    for path in output_paths(out, stem, formats):
        remove_path(partial_path(path))
    remove_path(progress_dir(out, stem))


class StackOutputs:
    """``with StackOutputs(...) as outs: outs.write(table)``, then ``outs.finish(summary)`` writes the JSON.

    On an exception inside the block every writer discards its partial file; nothing of the stack
    appears under a final name that was not there before. A writer's error (raised in the writer thread)
    is raised by a later ``write`` or on leaving the block, and discards the partial files the same way.
    """

    def __init__(self, out: str | os.PathLike, stem: str, formats: tuple[str, ...], *, pixel_size: float,
                 shape: tuple[int, int, int], three_d: bool = False, psf_sigma: float = 1.0,
                 source: str | None = None, source_dtype: str = "uint16", prob_map_block: int | None = None,
                 journal: bool = False, block: int = 256, journal_seconds: float = JOURNAL_SECONDS,
                 on_written: Callable[[EmitterTable], object] | None = None) -> None:
        self.out, self.stem, self.formats = Path(out), stem, formats
        self.shape = shape
        frames, height, width = shape
        extras = EXTRAS_3D if three_d else EXTRAS_2D
        # a 2-D model's z is 0 everywhere: no z column, which tools such as locan would read as 3-D data
        common = {"pixel_size": pixel_size, "width": width, "height": height, "frames": frames, "extras": extras,
                  "three_d": three_d}
        self._writers = []
        for fmt in formats:
            path = self.out / f"{stem}{SUFFIXES[fmt][0]}"
            options: dict[str, Any] = {}
            if fmt == "picasso":
                options = {"psf_sigma": psf_sigma, "source": source, "source_dtype": source_dtype}
            self._writers.append(open_writer(path, **common, **options))
        self.prob_map = (None if prob_map_block is None
                         else ProbabilityMap(prob_map_path(out, stem), shape, prob_map_block, keep_on_error=journal))
        self.journal = (LiveParts(out, stem, (), block=block, common=common, picasso={},
                                  folder=progress_dir(out, stem)) if journal else None)
        self.journal_seconds = journal_seconds
        self._closed_at = time.monotonic()
        self._journal_stop = 0  # the end of the last block the writer thread took (it closes parts there)
        self._stack = ExitStack()
        self._behind: WriteBehind[_Item] | None = None
        self._on_written = on_written  # called in the writer thread with every table written, in frame order
        self._stopping = threading.Event()  # a stop or an error: a replay still going on is cut short
        self._replay_pending = False  # ``replay`` asked for, not yet queued (it goes in front of the next block)
        self.n_localizations = 0
        self.last_frame = -1

    @property
    def paths(self) -> list[Path]:
        """The localization files and the probability map (final names), without the JSON summary."""
        paths = [p for w in self._writers for p in (w.path, getattr(w, "yaml_path", None)) if p is not None]
        return paths + ([self.prob_map.path] if self.prob_map is not None else [])

    @property
    def resume_files(self) -> dict[str, list[str]]:
        """A resumed stack's files (after the ``with`` block entered): ``continued`` from the temporary file the
        killed run left (cut back to its last part), or ``replayed`` from the journal."""
        continued = [w.path.name for w in self._writers if getattr(w, "continued", False)]
        return {"continued": continued, "replayed": [w.path.name for w in self._writers
                                                     if w.path.name not in continued]}

    def __enter__(self) -> StackOutputs:
        self.out.mkdir(parents=True, exist_ok=True)
        with ExitStack() as stack:
            for writer in self._writers:
                stack.enter_context(writer)
            if self.prob_map is not None:
                stack.enter_context(self.prob_map)
            # entered last, left first: the queue is drained (or dropped) before the writers close
            self._behind = stack.enter_context(WriteBehind(self._write_all, WRITE_QUEUE_BLOCKS))
            self._closed_at = time.monotonic()
            self._stack = stack.pop_all()
        return self

    def begin(self, resume: bool, meta: dict[str, Any]) -> int:
        """Start the journal (before the ``with`` block): afresh, or with ``resume`` after the parts a stopped or
        killed run closed; returns the first frame to compute (0 without a journal)."""
        if self.journal is None:
            return 0
        start = self.journal.begin(resume, meta)
        if self.prob_map is not None:
            self.prob_map.start_at(start)
        kept = self.journal.parts[-1].get("outputs", {}) if start and self.journal.parts else {}
        for writer in self._writers:  # a file the killed run kept whole up to its last part: continued, not rebuilt
            if hasattr(writer, "continue_from") and writer.path.name in kept:
                writer.continue_from(kept[writer.path.name])
        return start

    def replay(self) -> None:
        """Have the journal's parts (a resumed run's frames done before) written to every file: the writer thread
        reads and writes them in front of the first block ``write`` queues (or at the end of the ``with`` block),
        while this thread computes the next blocks, so the files keep frame order.

        Queued with the first new block rather than at once: the network's first calls are torch.compile's
        tracing, Python that the replay's Python in the writer thread would slow several-fold by holding the
        interpreter lock (a 256² resume's first two calls: 4.3 s alone, 19.8 s beside the replay)."""
        if self.journal is None or not self.journal.parts or self._replay_pending:
            return
        if self._behind is None:
            raise RuntimeError("StackOutputs.replay outside its with block")
        self._replay_pending = True
        self.n_localizations += sum(int(part["localizations"]) for part in self.journal.parts)
        self.last_frame = max(self.last_frame, int(self.journal.parts[-1]["stop"]) - 1)

    def write(self, table: EmitterTable, stop: int | None = None) -> None:
        """Append one block of emitters (frames must not go backwards) to every file; ``stop``: the block ends
        before this frame (the journal closes its parts at block ends)."""
        self._put(_Item(table, stop))

    def _put(self, item: _Item) -> None:
        if self._behind is None:  # checked first: a refused call leaves ``last_frame`` as it was
            raise RuntimeError("StackOutputs.write outside its with block")
        table = item.table
        if table is not None and len(table):
            first = int(table["frame"].min())
            if first < self.last_frame:
                raise ValueError(f"{self.stem}: emitters of frame {first} after frame {self.last_frame}")
            self.last_frame = int(table["frame"].max())
        self._queue_replay()
        self._behind.put(item)  # one item per block: a stop lands before or after a whole block, never inside
        if table is not None:
            self.n_localizations += len(table)

    def _queue_replay(self) -> None:
        if self._replay_pending and self._behind is not None:
            self._replay_pending = False
            self._behind.put(_Item(None, replay=True))

    def keep_progress(self) -> int:
        """At a stop: write what is queued, close the journal's part at the last block written, and return the
        frame a resumed run starts from (the end of the frames kept)."""
        if self._behind is None or self.journal is None:
            return 0
        self._stopping.set()  # the files are discarded at a stop: a replay going on need not finish
        self._behind.put(_Item(None, force=True))
        self._behind.drain()
        return self.journal.start

    def _write_all(self, item: _Item) -> None:
        """In the writer thread: the block to every file (and the journal), the journal's parts replayed, or the
        journal's part closed."""
        tables = [item.table] if item.table is not None else []
        writers = self._writers
        if item.replay and self.journal is not None:
            writers = [w for w in self._writers if not getattr(w, "continued", False)]
            tables = self.journal.tables() if writers or self._on_written is not None else iter(())
        for table in tables:
            if item.replay and self._stopping.is_set():
                return
            for writer in writers:
                writer.write(table)
            if self._on_written is not None:
                self._on_written(table)
        if item.table is not None and self.journal is not None and item.journal:
            self.journal.write(item.table)
        if item.stop is not None:
            self._journal_stop = item.stop
        if self.journal is not None and (item.force or (item.stop is not None and
                                         time.monotonic() - self._closed_at >= self.journal_seconds)):
            kept = {w.path.name: w.checkpoint() for w in self._writers if hasattr(w, "checkpoint")}
            self.journal.close_part(self._journal_stop, kept)
            self._closed_at = time.monotonic()

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is None:  # a resumed stack with no block left to compute: its files are the journal's
            self._queue_replay()
        self._behind = None
        if exc_type is not None:
            self._stopping.set()
        if exc_type is None:  # the old summary goes before any new file replaces an old one under its final name
            summary_path(self.out, self.stem).unlink(missing_ok=True)
        try:
            self._stack.__exit__(exc_type, exc, tb)
        finally:
            if self.journal is not None:
                self.journal.abort()  # an open part is incomplete; the closed parts stay until ``finish``

    def finish(self, summary: dict[str, Any]) -> Path:
        """Write ``<stem>.json`` atomically, then drop the journal; call after the ``with`` block closed every
        writer."""
        path = summary_path(self.out, self.stem)
        with atomic_output(path) as tmp:
            tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n")
        if self.journal is not None:
            self.journal.remove()
        return path
