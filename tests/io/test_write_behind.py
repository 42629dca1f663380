"""WriteBehind: writes in a thread behind a bounded queue; the producer waits only when it is full; errors
come back to the producer; the producer's own exception drops the queue and joins the thread."""

from __future__ import annotations

import threading

import pytest

from decode_mem.io.write_behind import THREAD_NAME, WriteBehind


class GatedWriter:
    """Records items; each write waits until the test opens the gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()  # set once a write has started
        self.items: list[int] = []
        self.threads: set[str] = set()

    def write(self, item: int) -> None:
        self.entered.set()
        self.gate.wait()
        self.threads.add(threading.current_thread().name)
        self.items.append(item)


def test_producer_waits_only_when_the_queue_is_full() -> None:
    writer = GatedWriter()
    depth = 3
    with WriteBehind(writer.write, depth=depth) as behind:
        # the worker takes one item and blocks in write; `depth` more fit in the queue: none of these waits
        for item in range(depth + 1):
            behind.put(item)
        blocked = threading.Thread(target=behind.put, args=(depth + 1,))
        blocked.start()
        blocked.join(timeout=0.3)
        assert blocked.is_alive()  # the queue is full: this put waits for the writer
        assert writer.items == []
        writer.gate.set()
        blocked.join(timeout=30)
        assert not blocked.is_alive()
    assert writer.items == list(range(depth + 2))  # all written, in order, when the block is left
    assert writer.threads == {THREAD_NAME}


class Failing:
    def __init__(self, fail_at: int) -> None:
        self.fail_at, self.seen = fail_at, []

    def write(self, item: int) -> None:
        if item == self.fail_at:
            raise OSError(28, "No space left on device")
        self.seen.append(item)


def test_a_failing_write_is_raised_in_the_producer_and_later_items_are_dropped() -> None:
    writer = Failing(fail_at=2)
    with pytest.raises(OSError, match="No space left"), WriteBehind(writer.write, depth=2) as behind:
        for item in range(1000):  # the error reaches a later put (or the exit), never a deadlock
            behind.put(item)
    assert writer.seen == [0, 1]


def test_a_failure_of_the_last_write_is_raised_on_exit() -> None:
    writer = Failing(fail_at=4)
    with pytest.raises(OSError), WriteBehind(writer.write, depth=8) as behind:
        for item in range(5):
            behind.put(item)
    assert writer.seen == [0, 1, 2, 3]


def test_the_producers_exception_drops_the_queue_and_joins_the_thread() -> None:
    """The writer is inside the first write (held at the gate) with 3 items queued when the producer fails: that
    write ends, the 3 queued items are never written, and the thread is gone when the exception comes out. The
    gate opens 0.5 s later, from a timer: by then the exit has long dropped the queue and is joining the thread."""
    writer = GatedWriter()
    opener = threading.Timer(0.5, writer.gate.set)
    with pytest.raises(KeyboardInterrupt), WriteBehind(writer.write, depth=4) as behind:
        for item in range(4):
            behind.put(item)
        assert writer.entered.wait(30)  # item 0 is being written, items 1-3 wait in the queue
        opener.start()
        raise KeyboardInterrupt
    assert writer.items == [0]  # the write under way finishes; the queue is dropped
    assert writer.gate.is_set()  # the exit waited for the thread, which waited for the gate
    assert not any(t.name == THREAD_NAME for t in threading.enumerate())


def test_depth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="depth"):
        WriteBehind(print, depth=0)
