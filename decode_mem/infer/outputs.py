"""The files of one stack: streaming localization writers, then the JSON summary, written last.

The writers run in a thread of their own behind a queue of ``WRITE_QUEUE_BLOCKS`` blocks (``WriteBehind``):
``write`` returns at once while the queue has room, so the loop that feeds the device does not wait for text
formatting, compression or the disk.

Every file is written under a ``.partial`` name and renamed when complete (the writers in
``decode_mem.io`` do this); the JSON summary is renamed last, so its presence means that every other
output of the stack is complete: ``--resume`` skips exactly the stacks that have one.
"""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

from decode_mem.infer.config import SUFFIXES
from decode_mem.infer.probmap import ProbabilityMap
from decode_mem.io.atomic import atomic_output, partial_path, remove_path
from decode_mem.io.localizations import open_writer
from decode_mem.io.table import EmitterTable
from decode_mem.io.write_behind import WriteBehind

EXTRAS_2D = ("prob", "sigma_x", "sigma_y", "sigma_photons")
EXTRAS_3D = ("prob", "sigma_x", "sigma_y", "sigma_z", "sigma_photons")
WRITE_QUEUE_BLOCKS = 4  # blocks of emitters waiting for the writers at most (a 256-frame block of 256² frames
# with ~600 emitters each is ~7 MB)


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
    """Drop what a killed run left under temporary names (never an output under its final name)."""
    for path in output_paths(out, stem, formats):
        remove_path(partial_path(path))


class StackOutputs:
    """``with StackOutputs(...) as outs: outs.write(table)``, then ``outs.finish(summary)`` writes the JSON.

    On an exception inside the block every writer discards its partial file; nothing of the stack
    appears under a final name that was not there before. A writer's error (raised in the writer thread)
    is raised by a later ``write`` or on leaving the block, and discards the partial files the same way.
    """

    def __init__(self, out: str | os.PathLike, stem: str, formats: tuple[str, ...], *, pixel_size: float,
                 shape: tuple[int, int, int], three_d: bool = False, psf_sigma: float = 1.0,
                 source: str | None = None, source_dtype: str = "uint16", prob_map_block: int | None = None) -> None:
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
                         else ProbabilityMap(prob_map_path(out, stem), shape, prob_map_block))
        self._stack = ExitStack()
        self._behind: WriteBehind[EmitterTable] | None = None
        self.n_localizations = 0
        self.last_frame = -1

    @property
    def paths(self) -> list[Path]:
        """The localization files and the probability map (final names), without the JSON summary."""
        paths = [p for w in self._writers for p in (w.path, getattr(w, "yaml_path", None)) if p is not None]
        return paths + ([self.prob_map.path] if self.prob_map is not None else [])

    def __enter__(self) -> StackOutputs:
        self.out.mkdir(parents=True, exist_ok=True)
        with ExitStack() as stack:
            for writer in self._writers:
                stack.enter_context(writer)
            if self.prob_map is not None:
                stack.enter_context(self.prob_map)
            # entered last, left first: the queue is drained (or dropped) before the writers close
            self._behind = stack.enter_context(WriteBehind(self._write_all, WRITE_QUEUE_BLOCKS))
            self._stack = stack.pop_all()
        return self

    def write(self, table: EmitterTable) -> None:
        """Append one block of emitters (frames must not go backwards) to every file."""
        if self._behind is None:  # checked first: a refused call leaves ``last_frame`` as it was
            raise RuntimeError("StackOutputs.write outside its with block")
        if len(table):
            first = int(table["frame"].min())
            if first < self.last_frame:
                raise ValueError(f"{self.stem}: emitters of frame {first} after frame {self.last_frame}")
            self.last_frame = int(table["frame"].max())
        self._behind.put(table)
        self.n_localizations += len(table)

    def _write_all(self, table: EmitterTable) -> None:
        """In the writer thread: the block to every file."""
        for writer in self._writers:
            writer.write(table)

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._behind = None
        self._stack.__exit__(exc_type, exc, tb)

    def finish(self, summary: dict[str, Any]) -> Path:
        """Write ``<stem>.json`` atomically; call after the ``with`` block closed every writer."""
        path = summary_path(self.out, self.stem)
        with atomic_output(path) as tmp:
            tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n")
        return path
