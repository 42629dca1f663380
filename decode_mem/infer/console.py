"""The CLI's observer of a batch run: progress bars, per-stack lines and warnings, and the memory log."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
from tqdm import tqdm  # the terminal's bars: tqdm.auto would import asyncio for notebooks (~0.04 s)

from decode_mem.cli import progress_bars
from decode_mem.infer.observe import InferObserver
from decode_mem.memory import MemoryTracker


class ConsoleObserver(InferObserver):
    """tqdm bars (one for the stacks when there are several, one per stack) unless ``quiet`` or stderr is no
    terminal (a log file gets no cursor codes); warnings always go to stderr; a
    MemoryTracker reads the main process's memory after every block (bounded history, for the report), and
    with ``memory_log_file`` also writes it as CSV."""

    def __init__(self, *, quiet: bool = False, memory_log_file: str | None = None) -> None:
        self.quiet = quiet
        self.tracker = MemoryTracker(memory_log_file, log_interval=1)
        self._overall: Any = None
        self._bar: Any = None
        self._said_wait = False
        self._engine_said: str | None = None

    def run_started(self, n_stacks: int) -> None:
        self._overall = tqdm(total=n_stacks, unit="stack", desc="stacks",
                             disable=not progress_bars(self.quiet) or n_stacks < 2, position=0, file=sys.stderr)

    def message(self, line: str) -> None:
        if not self.quiet:
            tqdm.write(line, file=sys.stdout)

    def warning(self, line: str) -> None:
        tqdm.write(f"warning: {line}", file=sys.stderr)

    def stack_started(self, stem: str, frames: int) -> None:
        # below the stacks bar only when it is drawn: a bar at position 1 closes with a cursor-up that leaves the
        # cursor at the bar's last column, where the next line would start (a lone "1" at column 160 in tmux)
        below = self._overall is not None and not self._overall.disable
        self._bar = tqdm(total=frames, unit=" frames", desc=stem, disable=not progress_bars(self.quiet), leave=False,
                         position=1 if below else 0, file=sys.stderr)

    def engine_chosen(self, stem: str, why: str) -> None:
        """One line per run: said again only where a stack of another size chose otherwise."""
        if why != self._engine_said:
            self._engine_said = why
            self.message(f"engine {why}")

    def block_done(self, stem: str, frames: int, result: Any | None) -> None:
        if self._bar is not None:
            self._bar.update(frames)
        if result is not None:
            self.tracker.update(step=result.t0, phase=stem)

    def waiting(self, stem: str, seconds_left: float | None) -> None:
        """A followed stack waits for frames (``seconds_left`` until the idle timeout ends it; None: frames came):
        the bar says so instead of standing still, or, without a bar, one line per wait."""
        if self._bar is not None and not self._bar.disable:
            self._bar.set_description_str(stem if seconds_left is None else
                                          f"{stem}: waiting for frames, ends in {seconds_left:.0f} s")
        elif seconds_left is None:
            self._said_wait = False
        elif not self._said_wait:
            self._said_wait = True
            self.message(f"{stem}: waiting for frames, ends in {seconds_left:.0f} s without a new byte")

    def stack_finished(self, stem: str) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._overall is not None:
            self._overall.update(1)

    def run_finished(self) -> None:
        if self._overall is not None:
            self._overall.close()
        self.tracker.close()

    def memory_history(self) -> Mapping[str, np.ndarray] | None:
        return self.tracker.history
