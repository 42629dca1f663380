"""torch.compile's graphs kept on disk, so that a fresh process (a ``--resume``, the next stack's worker) loads
them instead of tracing the network again.

``torch.compile`` caches its generated kernels on disk, but every new process still imports the compiler and
traces each graph again with dynamo: ~4 s for the 4 graphs of a 256² CPU run (a block's first unit and the carried
ones, of the frame U-Net and the temporal part), a tenth of a 90 % resume's time. ``Precompiled`` compiles each
input signature once ahead of time with AOTInductor (``torch.export`` then ``aoti_compile_and_package``: the
same inductor kernels, with a C++ wrapper in a shared library), saves the package under ``folder`` named by the
network's digest (code, config and weights: ``model.engine.network_digest``) and the signature, and loads it in
later processes through torch's C++ package loader: no dynamo or inductor import, milliseconds instead of the ~4 s
that loading ``aot_compile``'s graphs took (their loading imported the compiler).

The package computes torch.compile's numbers bit for bit (``tests/tiling/test_precompiled.py``).
Where anything fails (no folder, an export that fails, an unreadable file), the call goes to a plain
``torch.compile`` of the same function: slower to start, the same numbers.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import torch


def _signature(args: tuple[torch.Tensor, ...]) -> tuple:
    """What a compiled graph is specialized on: every input's shape, strides, dtype and device, and the modes."""
    modes = (torch.is_inference_mode_enabled(), torch.is_grad_enabled(),
             torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), torch.get_num_threads())
    return (*((tuple(a.shape), tuple(a.stride()), str(a.dtype), str(a.device)) for a in args), *map(str, modes))


class Precompiled:
    """A callable standing for ``torch.compile(fn, dynamic=False)`` (``fn`` a bound method of a module) whose
    graphs are saved in and loaded from ``folder/<name>-<signature>.pt2`` (AOTInductor packages)."""

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
        return graph(*args)

    def _plain_compiled(self) -> Callable[..., torch.Tensor]:
        if self._plain is None:
            self._plain = torch.compile(self._fn, dynamic=False)
        return self._plain

    def _graph(self, key: tuple, args: tuple[torch.Tensor, ...]) -> Callable[..., torch.Tensor]:
        path = self._folder / f"{self._name}-{hashlib.sha256(repr(key).encode()).hexdigest()[:16]}.pt2"
        loaded = self._load(path)
        if loaded is not None:
            self.loaded += 1
            return loaded
        try:
            published = self._build(args, path, replace=path.is_file())  # a file there that did not load: damaged
        except Exception:  # an export that fails, no folder, read-only: the plain compile
            return self._plain_compiled()
        loaded = self._load(path)
        if loaded is None:
            return self._plain_compiled()
        if published:
            self.saved += 1
        else:  # another process's package, published while this one was built
            self.loaded += 1
        return loaded

    def _build(self, args: tuple[torch.Tensor, ...], path: Path, *, replace: bool = False) -> bool:
        """Export the function at ``args`` and compile it ahead of time into the package ``path``, written whole
        or not at all (a temporary name, then published: a concurrent run or a kill leaves no half package).

        A package another process published meanwhile is kept, not replaced (``replace``: only a damaged one is):
        a process may be reading it (torch's loader opens the archive more than once), and two builds of one
        graph need not be the same bytes. A GPU machine's suite (14 processes, one cache folder) had a process
        die of a segmentation fault inside the loader while replacing was allowed (benchmarks/results/
        gpu_suite_250s.log); whether this race was its cause is not known. True where this build took the name.
        """
        import warnings

        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.pt2")  # the packager wants .pt2
        try:
            with warnings.catch_warnings():  # torch's own deprecation notes from inside export: not the user's
                warnings.simplefilter("ignore")
                from torch._inductor import aoti_compile_and_package

                program = torch.export.export(_Call(self._module, self._fn.__name__), tuple(args))
                aoti_compile_and_package(program, package_path=str(tmp))
            return _publish(tmp, path, replace)
        finally:
            tmp.unlink(missing_ok=True)

    def _load(self, path: Path) -> Callable[..., torch.Tensor] | None:
        if not path.is_file():
            return None
        try:  # torch's C++ loader: ``torch._inductor.aoti_load_package`` would import the compiler (~1.3 s)
            loader = torch._C._aoti.AOTIModelPackageLoader(str(path), "model", False, 1, -1)
        except Exception:  # written by another torch, or damaged: compiled again (and replaced)
            return None

        def run(*a: torch.Tensor) -> torch.Tensor:
            (out,) = loader.run(list(a))
            return out

        return run


def _publish(tmp: Path, path: Path, replace: bool) -> bool:
    """Give the finished file ``tmp`` the name ``path``: atomically and only where no file has it (a hard link,
    which fails where one exists), or replacing it (``replace``). A file system without hard links: replaced.
    False where another process's file kept the name."""
    if not replace:
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except OSError:
            pass
    os.replace(tmp, path)
    return True


class _Call(torch.nn.Module):
    """``module.<name>(*args)`` as a module's forward, for ``torch.export`` (which exports modules)."""

    def __init__(self, module: torch.nn.Module, name: str) -> None:
        super().__init__()
        self.module, self.name = module, name

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return getattr(self.module, self.name)(*args)
