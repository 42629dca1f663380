"""Data flows io -> simulate -> model -> tiling -> postprocess -> writers; no layer imports a higher one."""

from __future__ import annotations

import ast
from pathlib import Path

import decode_mem

PACKAGE = Path(decode_mem.__file__).parent
# rank of each first-level module; CLIs and anything not listed sit on top
RANK = {
    "errors": 0, "config": 0,
    "io": 1, "memory": 1,
    "simulate": 2,
    "model": 3,
    "tiling": 4,
    "postprocess": 5,
    "evaluate": 6,
    "training": 7, "engine": 7, "render": 7,
}
TOP = 9
CLI_NAMES = {"__main__", "train", "infer", "pipeline", "cli"}


def _module_name(path: Path) -> list[str]:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _rank(parts: list[str]) -> int:
    if not parts:
        return TOP
    if parts[-1] in CLI_NAMES:
        return TOP
    return RANK.get(parts[0], TOP)


def _internal_imports(path: Path) -> list[list[str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        found += [n.split(".")[1:] for n in names if n.split(".")[0] == "decode_mem"]
    return found


def test_every_layer_imports_only_itself_or_lower_layers() -> None:
    violations = []
    for path in PACKAGE.rglob("*.py"):
        here = _module_name(path)
        for target in _internal_imports(path):
            if _rank(target) > _rank(here):
                violations.append(f"decode_mem.{'.'.join(here)} imports decode_mem.{'.'.join(target)}")
    assert not violations, "upward imports:\n" + "\n".join(violations)


def test_layering_check_detects_an_upward_import() -> None:
    assert _rank(["io", "stack"]) < _rank(["model", "net"]) < _rank(["train"])
