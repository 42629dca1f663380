"""torch.compile's graphs kept on disk, so that a fresh process (a ``--resume``, the next stack's worker) loads
them instead of tracing the network again.

``torch.compile`` caches its generated kernels on disk, but every new process still imports the compiler and
traces each graph again with dynamo: ~4 s for the 4 graphs of a 256² CPU run (a block's first unit and the carried
ones, of the frame U-Net and the temporal part), a tenth of a 90 % resume's time. ``Precompiled`` compiles each
input signature once with ``aot_compile`` (whole graph), saves it under ``folder`` named by the network's digest
(code, config and weights: ``model.engine.network_digest``) and the signature, and loads it in later processes.

The saved graph computes the same kernels as ``torch.compile`` (bitwise: ``tests/tiling/test_precompiled.py``).
Where anything fails (no folder, a graph break, an unreadable file, a guard that no longer holds), the call goes
to a plain ``torch.compile`` of the same function: slower to start, the same numbers.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def _signature(args: tuple[torch.Tensor, ...]) -> tuple:
    """What a compiled graph is specialized on: every input's shape, strides, dtype and device, and the modes."""
    modes = (torch.is_inference_mode_enabled(), torch.is_grad_enabled(),
             torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), torch.get_num_threads())
    return (*((tuple(a.shape), tuple(a.stride()), str(a.dtype), str(a.device)) for a in args), *map(str, modes))


class Precompiled:
    """A callable standing for ``torch.compile(fn, dynamic=False)`` (``fn`` a bound method of a module) whose
    graphs are saved in and loaded from ``folder/<name>-<signature>.bin``."""

    def __init__(self, fn: Callable[..., torch.Tensor], folder: str | os.PathLike, name: str) -> None:
        self._fn, self._module = fn, fn.__self__
        self._folder, self._name = Path(folder), name
        self._graphs: dict[tuple, Callable[..., torch.Tensor]] = {}
        self._plain: Callable[..., torch.Tensor] | None = None
        self.loaded = self.saved = 0  # graphs read from the folder / written to it by this object

    def __call__(self, *args: torch.Tensor) -> torch.Tensor:
        key = _signature(args)
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._graphs[key] = self._graph(key, args)
        try:
            return graph(*args)
        except RuntimeError as e:
            if "GuardManager check failed" not in str(e):
                raise
            graph = self._graphs[key] = self._plain_compiled()
            return graph(*args)

    def _plain_compiled(self) -> Callable[..., torch.Tensor]:
        if self._plain is None:
            self._plain = torch.compile(self._fn, dynamic=False)
        return self._plain

    def _graph(self, key: tuple, args: tuple[torch.Tensor, ...]) -> Callable[..., torch.Tensor]:
        path = self._folder / f"{self._name}-{hashlib.sha256(repr(key).encode()).hexdigest()[:16]}.bin"
        loaded = self._load(path)
        if loaded is not None:
            self.loaded += 1
            return loaded
        try:
            compiled = torch.compile(self._fn, dynamic=False, fullgraph=True).aot_compile((args, {}))
        except Exception:  # a graph break, or the function cannot be compiled ahead: the plain compile
            return self._plain_compiled()
        with contextlib.suppress(Exception):  # no folder, read-only, a value that does not pickle: not kept
            self._save(compiled, path)
            self.saved += 1
        return lambda *a: compiled(self._module, *a)

    def _load(self, path: Path) -> Callable[..., torch.Tensor] | None:
        if not path.is_file():
            return None
        try:
            with path.open("rb") as fh:
                compiled = torch.compiler.load_compiled_function(fh)
        except Exception:  # written by another torch, or damaged: compiled again (and replaced)
            return None
        return lambda *a: compiled(self._module, *a)

    def _save(self, compiled: Any, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # torch writes it whole or not at all (a temporary file renamed): a concurrent run or a kill leaves none
        compiled.save_compiled_function(str(path))
