"""Background prefetch: read the next items of an iterator in a thread while the caller works on this one.

    for t0, frames in prefetch(stack.blocks(64), depth=2):
        ...

Memory is bounded: at most ``depth`` items wait in the queue, plus the one being produced and the one
the caller holds. Reading (file I/O, zlib/zstd decoding) releases the GIL, so it overlaps with compute.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

THREAD_NAME = "decode_mem-prefetch"
_POLL_S = 0.05  # how often a blocked producer checks whether the consumer has gone


def prefetch(iterable: Iterable[T], depth: int = 2, *, cancel: Callable[[], None] | None = None) -> Iterator[T]:
    """Iterate over ``iterable`` with up to ``depth`` items read ahead in a background thread.

    The producer's exception is re-raised in the consumer at the position it occurred. When the consumer
    stops early (``break``, exception, ``close()``), the thread stops after the item it is reading and is
    joined before this generator finishes closing, so no thread outlives the loop; ``cancel`` is called first,
    to wake a source that waits inside its next item (a followed stack waiting for frames that may never come:
    without it a Ctrl-C waited out ``--idle_timeout``).
    """
    if depth < 1:
        raise ValueError(f"prefetch: depth must be >= 1, got {depth}")
    items: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def put(item: tuple[bool, object]) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        iterator = iter(iterable)
        try:
            for item in iterator:
                if not put((True, item)):
                    return
            put((False, done))
        except BaseException as e:  # handed to the consumer, which re-raises it
            put((False, e))
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()  # a generator source is closed in the thread that ran it

    thread = threading.Thread(target=produce, name=THREAD_NAME, daemon=True)
    thread.start()
    try:
        while True:
            ok, item = items.get()
            if ok:
                yield item
            elif item is done:
                return
            else:
                raise item
    finally:
        stop.set()
        if cancel is not None and thread.is_alive():
            cancel()
        thread.join()
