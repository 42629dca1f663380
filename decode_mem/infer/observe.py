"""What a batch run tells its observers: the CLI shows progress bars and lines, a MemoryTracker records blocks.

``run_inference(cfg, observer)`` calls these hooks and prints nothing itself. Subclass and override what you
need; the base class ignores everything. ``ConsoleObserver`` (``decode_mem.infer.console``) is the CLI's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


class InferObserver:
    """No-op hooks of a batch inference run, in the order they are called."""

    def run_started(self, n_stacks: int) -> None:
        """The stacks are planned: ``n_stacks`` will be processed."""

    def message(self, line: str) -> None:
        """A line for the user: a stack done or skipped."""

    def warning(self, line: str) -> None:
        """A stack that failed, or data outside the model's domain."""

    def stack_started(self, stem: str, frames: int) -> None:
        """Work on a stack begins."""

    def engine_chosen(self, stem: str, why: str) -> None:
        """``--engine auto`` chose what computes the network for a stack, and ``why`` (one line,
        ``footprint.engines.choose_engine``); called at the stack's first block."""

    def block_done(self, stem: str, frames: int, result: Any | None) -> None:
        """``frames`` more frames are done (``result``: the engine's ``BlockResult``, None from dask workers)."""

    def stack_finished(self, stem: str) -> None:
        """A stack is done (or failed)."""

    def run_finished(self) -> None:
        """Every stack is done."""

    def stop_requested(self) -> bool:
        """Polled after every block: True stops the run there (a Cancel button); what reached disk is kept, and
        ``run_inference`` raises ``decode_mem.errors.Stopped`` (resumable with ``resume``)."""
        return False

    def memory_history(self) -> Mapping[str, np.ndarray] | None:
        """The memory history the observer recorded (``MemoryTracker.history``) for the report, or None."""
        return None
