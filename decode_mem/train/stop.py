"""Training steps that a signal cannot cut in half: SIGINT/SIGTERM during a step are raised when it ends.

``run`` (``decode_mem.cli``) makes both signals raise ``Interrupted`` wherever the program is. A step interrupted
between two parameters' updates would leave weights that no checkpoint should hold, so the training loop runs
each step inside ``signals_deferred()``; the loop then saves a checkpoint at the last whole step and stops.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from decode_mem.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Record SIGINT/SIGTERM inside the block and raise ``Interrupted`` for the first when it ends (main thread
    only; elsewhere signals cannot be handled and this does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if got:
        raise Interrupted(got[0])
