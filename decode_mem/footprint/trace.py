"""Counting the memory a computation allocates: live tensor bytes, on real tensors or on fake ones.

``LiveBytes`` counts the bytes of tensors created inside it while they are alive (a storage once, views
share it) and keeps the peak: exact for PyTorch's own allocations; library scratch space (oneDNN, cuDNN
workspaces) is not seen. Under ``fake_network`` (``FakeTensorMode``) the same code runs on tensors that have
shapes, dtypes and devices but no memory, so the peak of a 4096² tile is known in milliseconds, before
anything real is allocated.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeCopyMode, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from decode_mem.footprint.fingerprint import (  # noqa: F401  (re-exported: where they were)
    NETWORK_CODE,
    remember_receptive_field,
    remembered_trace,
    source_fingerprint,
    trace_cache_path,
)
from decode_mem.threads import MMAP_THRESHOLD


class LiveBytes(TorchDispatchMode):
    """Bytes of the tensors created inside the mode that are still alive; ``peak`` is their maximum.
    ``heap_peak``: the same for the storages of at most ``heap_limit`` bytes (those glibc's malloc serves from
    its heap rather than from their own mappings once its mmap threshold has grown to the limit)."""

    def __init__(self, heap_limit: int = MMAP_THRESHOLD) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.heap_limit = heap_limit
        self.heap_live = 0
        self.heap_peak = 0
        self._owned: set[int] = set()

    def _release(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        if nbytes <= self.heap_limit:
            self.heap_live -= nbytes
        self._owned.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # torch's dispatch protocol
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key, nbytes = storage._cdata, storage.nbytes()  # the StorageImpl: real and fake tensors alike
            if nbytes == 0 or key in self._owned:
                continue
            self._owned.add(key)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            if nbytes <= self.heap_limit:
                self.heap_live += nbytes
                self.heap_peak = max(self.heap_peak, self.heap_live)
            weakref.finalize(t, self._release, key, nbytes)
        return out


def peak_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes ``fn()`` allocates above what was allocated before: the CUDA allocator's peak on CUDA,
    else ``LiveBytes``."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - base)
    counter = LiveBytes()
    with counter:
        fn()
    return counter.peak


@contextmanager
def fake_network(net: torch.nn.Module) -> Iterator[tuple[Any, LiveBytes]]:
    """``(fake copy of net, counter)`` inside a FakeTensorMode with the counter active: run the work in the
    block, read ``counter.peak``. The receptive field is measured (and cached) outside first."""
    if hasattr(net, "receptive_field"):
        net.receptive_field()
    mode = FakeTensorMode(allow_non_fake_inputs=False)
    with FakeCopyMode(mode):
        fake = copy.deepcopy(net)
    counter = LiveBytes()
    with mode, counter:
        yield fake, counter


