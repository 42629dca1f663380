"""Parallel block streams on a CPU: ``streams`` blocks computed at once, each in a thread of its own with an equal
share of torch's threads.

The serial parts of one block (staging, post-processing in ``consume``) then overlap another block's network
work. The stack's last block waits for the others and then runs alone on all threads, rather than on one stream's
share beside idle ones. Blocks are independent (each has its context frames), so the results are those of one
stream up to float rounding (fewer threads per convolution change oneDNN's summation order).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait

import numpy as np

from decode_mem.errors import exception_line
from decode_mem.tiling.backoff import BackOff, is_oom
from decode_mem.tiling.blocks import BlockResult

Blocks = Iterator[tuple[int, np.ndarray]]


def run_streams(blocks: Blocks, n_frames: int, streams: int, backoff: BackOff,
                attempt: Callable[[int, np.ndarray], BlockResult],
                redo: Callable[[int, np.ndarray, int], BlockResult]) -> Iterator[BlockResult]:
    """The results of ``blocks`` with ``streams`` in flight, yielded in frame order.

    ``attempt(t0, frames)`` computes a block once with the current sizes (an out-of-memory error propagates);
    ``redo(t0, frames, retries)`` computes it in this thread, backing off as often as needed. The last block (the
    one that reaches frame ``n_frames``) runs here on all threads once the others are done. An out-of-memory error
    in one lets the others finish before the sizes shrink; that block is then redone here with back-off (a block
    that failed with sizes already shrunk since is redone without shrinking them again).
    """
    import torch  # torch's threads are what the streams share (a runtime's too: ``model.engine`` sizes by them)

    threads = torch.get_num_threads()
    share = max(1, threads // streams)
    pending: deque[tuple[int, np.ndarray, tuple[int, int], Future]] = deque()

    def collect() -> BlockResult:
        t0, frames, sizes, future = pending.popleft()
        try:
            return future.result()
        except RuntimeError as e:
            if not is_oom(e):
                raise
            failure = exception_line(e)
        wait([f for *_, f in pending])  # no block may be running while the sizes change
        if sizes != backoff.sizes():  # it failed with sizes an earlier block's back-off has already shrunk
            return redo(t0, frames, 0)
        backoff.shrink(t0, 1, failure)
        return redo(t0, frames, 1)

    pool = ThreadPoolExecutor(streams, thread_name_prefix="decode_mem-stream", initializer=torch.set_num_threads,
                              initargs=(share,))
    try:
        for t0, frames in blocks:
            if t0 + len(frames) - 2 >= n_frames:  # the last block: alone, on every thread
                while pending:
                    yield collect()
                torch.set_num_threads(threads)
                yield redo(t0, frames, 0)
                continue
            pending.append((t0, frames, backoff.sizes(), pool.submit(attempt, t0, frames)))
            if len(pending) >= streams:
                yield collect()
        while pending:
            yield collect()
    finally:  # also when the consumer stopped early or a block failed: start nothing new, let running ones end
        pool.shutdown(wait=True, cancel_futures=True)
        torch.set_num_threads(threads)  # the streams' setting also changed torch's default for new threads
