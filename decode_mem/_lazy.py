"""Lazy package exports (PEP 562): ``import decode_mem.x`` stays cheap, a name is imported on first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, table: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` whose public ``name`` lives in module ``table[name]``
    (a module path relative to the package, e.g. ``"runner"``, or absolute, ``"decode_mem.io.stack"``)."""

    def __getattr__(name: str) -> Any:
        if name in table:
            module = table[name]
            module = module if module.startswith("decode_mem") else f"{package}.{module}"
            return getattr(importlib.import_module(module), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(table)

    return __getattr__, __dir__
