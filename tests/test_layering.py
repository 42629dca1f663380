"""The tree is the data flow: io -> simulate -> model -> tiling -> postprocess -> infer -> train -> pipeline.
No package imports a higher one (absolute or relative imports); a job's CLI (``__main__``) sits on top."""

from __future__ import annotations

import ast
from pathlib import Path

import decode_mem

PACKAGE = Path(decode_mem.__file__).parent
# rank of each first-level package or module, low -> high; a module may import its own rank or lower
RANK = {
    "errors": 0, "config": 0, "cli": 0, "_lazy": 0, "threads": 0,
    "io": 1, "memory": 1,
    "simulate": 2,
    "calibrate": 3, "psf": 3,
    "model": 4,
    "tiling": 5,
    "postprocess": 6, "plan": 6,
    "evaluate": 7, "render": 7, "drift": 7, "report": 7,
    "infer": 8,
    "train": 9,
    "export": 10, "fit": 10,
    "pipeline": 11,
}
TOP = 12  # CLIs (``__main__``) and the package's own ``__init__``


def module_parts(path: Path) -> list[str]:
    """``decode_mem/infer/runner.py`` -> ``['infer', 'runner']`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def rank(parts: list[str]) -> int:
    if not parts or parts[-1] == "__main__":
        return TOP
    return RANK.get(parts[0], TOP)


def imported(source: str, parts: list[str], is_package: bool) -> list[list[str]]:
    """The decode_mem modules a module imports, absolute (``decode_mem.x``) and relative (``.x``, ``..x``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module.split(".")]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            package = parts if is_package else parts[:-1]
            base = ["decode_mem", *package[: len(package) - (node.level - 1)]]
            names = [[*base, *node.module.split(".")]] if node.module else [[*base, a.name] for a in node.names]
        else:
            continue
        found += [n[1:] for n in names if n[0] == "decode_mem"]
    return found


def violations(source: str, parts: list[str], is_package: bool = False) -> list[str]:
    here = rank(parts)
    return [f"decode_mem.{'.'.join(parts)} imports decode_mem.{'.'.join(t)}"
            for t in imported(source, parts, is_package) if rank(t) > here]


def test_every_layer_imports_only_itself_or_lower_layers() -> None:
    found = []
    for path in PACKAGE.rglob("*.py"):
        found += violations(path.read_text(), module_parts(path), path.name == "__init__.py")
    assert not found, "upward imports:\n" + "\n".join(found)


def test_every_package_has_a_rank() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert packages | modules <= set(RANK), f"unranked: {sorted((packages | modules) - set(RANK))}"


def test_the_check_catches_upward_imports_absolute_and_relative() -> None:
    assert violations("from decode_mem.infer import predict_stack\n", ["model", "net"])
    assert violations("import decode_mem.train.loop\n", ["tiling", "plan"])
    # relative: decode_mem/io/stack.py doing `from ..simulate import x` reaches a higher layer
    assert violations("from ..simulate import config\n", ["io", "stack"])
    assert violations("from .. import pipeline\n", ["io", "stack"])
    # allowed: same package, lower layers, and any import from a CLI
    assert not violations("from .plan import TilePlan\nfrom decode_mem.io import open_stack\n", ["tiling", "executor"])
    assert not violations("from decode_mem.pipeline import run_pipeline\n", ["infer", "__main__"])
