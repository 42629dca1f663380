"""Write behind: a writer's ``write`` runs in a thread of its own, behind a queue of a fixed number of items.

    with WriteBehind(writer.write, depth=4) as behind:
        for table in tables:
            behind.put(table)   # returns at once while fewer than ``depth`` items wait

The producer (the loop that feeds the device) waits only when ``depth`` items are already queued, so memory is
bounded by ``depth`` items plus the one being written. Formatting, compression and file I/O mostly release the
GIL, so they overlap the producer's work. A failing ``write`` is raised in the producer: by the next ``put``,
or on leaving the ``with`` block (the items after it are dropped). When the block is left with an exception,
the queued items are dropped and the thread is joined before the exception goes on.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")

THREAD_NAME = "decode_mem-writer"
_END = object()


class _Drained:
    """Queued by ``drain``: set when the worker reaches it (every item before it written or dropped)."""

    def __init__(self) -> None:
        self.event = threading.Event()


class WriteBehind(Generic[T]):
    """Calls ``write(item)`` for every ``put(item)``, in order, in a worker thread (module docstring)."""

    def __init__(self, write: Callable[[T], object], depth: int = 4) -> None:
        if depth < 1:
            raise ValueError(f"WriteBehind: depth must be >= 1, got {depth}")
        self._write = write
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._abort = threading.Event()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)

    def __enter__(self) -> WriteBehind[T]:
        self._thread.start()
        return self

    def put(self, item: T) -> None:
        """Queue ``item``; blocks only while the queue is full. Raises the error of a ``write`` that failed."""
        self._raise_error()
        self._queue.put(item)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if isinstance(item, _Drained):
                item.event.set()
                continue
            if self._error is not None or self._abort.is_set():
                continue  # keep taking items, so that a producer never blocks on a dead writer
            try:
                self._write(item)
            except BaseException as e:  # handed to the producer
                self._error = e

    def drain(self) -> None:
        """Wait until every item put so far was written (or dropped after a failed write); raises nothing, so that
        it can run while another exception is on its way (a stop keeps what was computed)."""
        marker = _Drained()
        self._queue.put(marker)
        marker.event.wait()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is not None:
            self._abort.set()
        self._queue.put(_END)  # the worker drains the queue, so this returns
        self._thread.join()
        if exc_type is None:
            self._raise_error()
