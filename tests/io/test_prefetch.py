"""prefetch: order, bounded read-ahead, exceptions in the consumer, no thread left behind."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import tifffile
from test_stack import movie

from decode_mem.io import open_stack, prefetch
from decode_mem.io.prefetch import THREAD_NAME


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def wait_until(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_order_is_kept_and_the_thread_ends() -> None:
    assert list(prefetch(range(100), depth=3)) == list(range(100))
    assert list(prefetch([])) == []
    assert wait_until(lambda: not prefetch_threads())


def test_blocks_through_prefetch_equal_blocks(tmp_path) -> None:
    data = movie((10, 8, 8))
    tifffile.imwrite(tmp_path / "m.tif", data, compression="zlib")
    with open_stack(tmp_path / "m.tif") as stack:
        direct = list(stack.blocks(3))
        fetched = list(prefetch(stack.blocks(3)))
    assert [t0 for t0, _ in fetched] == [t0 for t0, _ in direct]
    for (_, a), (_, b) in zip(direct, fetched, strict=True):
        np.testing.assert_array_equal(a, b)


def test_read_ahead_is_bounded_by_depth() -> None:
    produced = []

    def source():
        for i in range(50):
            produced.append(i)
            yield i

    it = prefetch(source(), depth=2)
    assert next(it) == 0
    time.sleep(0.2)  # let the producer run as far as it can
    assert len(produced) <= 1 + 2 + 1  # the item held + depth queued + one blocked in put()
    it.close()


def test_producer_exception_is_raised_in_the_consumer_in_place() -> None:
    def source():
        yield 1
        yield 2
        raise OSError("disk gone")

    received = []
    with pytest.raises(OSError, match="disk gone"):
        for item in prefetch(source()):
            received.append(item)
    assert received == [1, 2]
    assert wait_until(lambda: not prefetch_threads())


def test_early_stop_stops_the_thread_and_closes_the_source() -> None:
    closed = threading.Event()

    def source():
        try:
            yield from range(10**9)
        finally:
            closed.set()

    it = prefetch(source(), depth=2)
    for item in it:
        if item == 3:
            break
    it.close()  # what the garbage collector does to an abandoned generator
    assert not prefetch_threads()  # joined inside close()
    assert closed.is_set()


def test_consumer_exception_stops_the_thread() -> None:
    with pytest.raises(RuntimeError, match="consumer"):
        for item in prefetch(iter(range(10**9))):
            if item == 5:
                raise RuntimeError("consumer failed")
    assert wait_until(lambda: not prefetch_threads())


def test_depth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="depth"):
        next(prefetch(range(3), depth=0))
