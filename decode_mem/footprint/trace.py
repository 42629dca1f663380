"""Counting the memory a computation allocates: live tensor bytes, on real tensors or on fake ones.

``LiveBytes`` counts the bytes of tensors created inside it while they are alive (a storage once, views
share it) and keeps the peak: exact for PyTorch's own allocations; library scratch space (oneDNN, cuDNN
workspaces) is not seen. Under ``fake_network`` (``FakeTensorMode``) the same code runs on tensors that have
shapes, dtypes and devices but no memory, so the peak of a 4096² tile is known in milliseconds, before
anything real is allocated.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.util
import json
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeCopyMode, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from decode_mem.footprint.cache import cache_path, read_table, remember
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


def trace_cache_path() -> Path:
    """Traced working sets, remembered per machine like the timings (``$DECODE_MEM_CACHE``'s folder): a trace
    costs seconds (torch's fake-tensor machinery is imported and the network run on fake tensors), a lookup none."""
    return cache_path().with_name("traced_memory.json")


NETWORK_CODE = ("decode_mem.model", "decode_mem.tiling")  # the packages whose code decides a unit's memory and speed


def source_fingerprint(packages: tuple[str, ...] | None = None) -> str:
    """A short hash of the Python sources of ``packages``: a remembered trace or timing is reused only by the code
    that made it (an in-place activation changes the memory of the same architecture). Default: ``NETWORK_CODE``.
    The files are hashed again only where one changed (its size or modification time): a plan looks the
    fingerprint up for every candidate."""
    files = []
    for name in packages or NETWORK_CODE:
        spec = importlib.util.find_spec(name)
        folders = list(spec.submodule_search_locations or []) if spec else []
        for folder in map(Path, folders):
            for path in sorted(folder.rglob("*.py")):
                stat = path.stat()
                files.append((name, str(folder), path.relative_to(folder).as_posix(), stat.st_mtime_ns, stat.st_size))
    return _fingerprint(tuple(files))


@functools.lru_cache(maxsize=8)
def _fingerprint(files: tuple[tuple[str, str, str, int, int], ...]) -> str:
    digest = hashlib.sha1()
    for name, folder, relative, _, _ in files:
        digest.update(f"{name}/{relative}".encode())
        digest.update((Path(folder) / relative).read_bytes())
    return digest.hexdigest()[:12]


def remember_receptive_field(net: torch.nn.Module) -> None:
    """Have ``net`` take the receptive field remembered for its architecture and code (``remembered_trace``), measured
    and remembered where none is: the probe runs once per machine, architecture and version of the network code."""
    if hasattr(net, "assume_receptive_field"):
        net.assume_receptive_field(remembered_trace(net, ["receptive_field"], lambda: int(net.receptive_field())))


def remembered_trace(net: torch.nn.Module, what: list[Any], trace: Callable[[], Any]) -> Any:
    """``trace()`` (traced peaks in bytes, JSON), remembered under the network's architecture, ``what`` was traced,
    torch's version and the network code's ``source_fingerprint``. A network without a ``config.to_dict()`` is
    traced every time."""
    arch = net.config.to_dict() if hasattr(net, "config") and hasattr(net.config, "to_dict") else None
    if arch is None:
        return trace()
    key = json.dumps([arch, what, torch.__version__, source_fingerprint()], sort_keys=True, default=str)
    known = read_table(trace_cache_path())
    if key in known:
        return known[key]
    peak = trace()
    remember(trace_cache_path(), {key: peak})  # a read-only home: plan without remembering
    return peak
