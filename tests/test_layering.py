"""The tree is layered as ``decode_mem/__init__.py``'s docstring lists it (the one place the order is written):
no module imports a higher layer (absolute or relative imports, inside functions too, a job's ``__main__``
included) and no two packages import each other, directly or around a loop."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import decode_mem

PACKAGE = Path(decode_mem.__file__).parent


def layers(package: Path = PACKAGE) -> dict[str, int]:
    """Layer of each first-level package or module, low -> high, read from the package docstring's first literal
    block (after its first ``::``): a line there that starts a layer names it, comma-separated, before two spaces."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    block = doc.split("::\n", 1)[1] if "::\n" in doc else ""
    rank: dict[str, int] = {}
    for line in block.lstrip("\n").splitlines():
        if not line.startswith("    "):
            break  # the end of the block
        m = re.match(r" {4}(\w[\w, ]*?)(?: {2,}|$)", line)
        if m:
            rank.update(dict.fromkeys((name.strip() for name in m.group(1).split(",")), len(set(rank.values()))))
    return rank


def module_parts(path: Path, package: Path = PACKAGE) -> list[str]:
    """``decode_mem/infer/runner.py`` -> ``['infer', 'runner']`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(package).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def imported(source: str, parts: list[str], is_package: bool, runtime: bool = False) -> list[list[str]]:
    """The decode_mem modules a module imports, absolute (``decode_mem.x``) and relative (``.x``, ``..x``);
    with ``runtime``, not those under ``if TYPE_CHECKING:`` (annotations only, never executed)."""
    tree = ast.parse(source)
    typing_only: set[int] = set()
    if runtime:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                typing_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "decode_mem":
            names = [["decode_mem", a.name] for a in node.names]  # ``from decode_mem import io``
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


def check(package: Path = PACKAGE) -> list[str]:
    """Every layering problem of the tree at ``package``: upward imports, imports of another job's CLI (what CLIs
    share lives below them) and package loops (empty: none)."""
    rank = layers(package)
    top = max(rank.values(), default=0) + 1  # the package's own ``__init__``: the facade over every layer
    problems, edges = [], {}
    for path in sorted(package.rglob("*.py")):
        parts = module_parts(path, package)
        here = rank.get(parts[0], top) if parts else top
        for target in imported(path.read_text(), parts, path.name == "__init__.py"):
            if target and target[-1] == "__main__" and target[0] != parts[0]:
                problems.append(f"decode_mem.{'.'.join(parts)} imports another job's CLI: "
                                f"decode_mem.{'.'.join(target)}")
            if target and rank.get(target[0], top) > here:
                problems.append(f"decode_mem.{'.'.join(parts)} (layer {parts[0]}) imports a higher layer: "
                                f"decode_mem.{'.'.join(target)}")
            if parts and target and target[0] != parts[0]:
                edges.setdefault(parts[0], set()).add(target[0])
    return problems + [f"package loop: {' -> '.join(loop)}" for loop in loops(edges)]


def module_loops(package: Path = PACKAGE) -> list[str]:
    """Import loops between the modules of one package (``model.net`` <-> ``model.receptive_field``), counting
    imports inside functions too (they run) but not ``TYPE_CHECKING`` ones nor a package's ``__init__`` (a lazy
    facade over its modules)."""
    modules = {".".join(module_parts(p, package)): p for p in package.rglob("*.py") if p.name != "__init__.py"}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        parts = name.split(".")
        for target in imported(path.read_text(), parts, False, runtime=True):
            for k in range(len(target), 0, -1):  # ``from decode_mem.a.b import c``: module a.b.c or a.b
                dotted = ".".join(target[:k])
                if dotted in modules:
                    if dotted != name and target[0] == parts[0]:
                        edges.setdefault(name, set()).add(dotted)
                    break
    return [f"module loop: {' -> '.join(loop)}" for loop in loops(edges)]


def loops(edges: dict[str, set[str]]) -> list[list[str]]:
    """One loop ``[a, b, ..., a]`` through each package that lies on one (depth-first search)."""
    found, done = [], set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            loop = [*path[path.index(node):], node]
            if not set(loop) <= done:
                found.append(loop)
                done.update(loop)
            return
        for nxt in sorted(edges.get(node, ())):
            visit(nxt, [*path, node])

    for start in sorted(edges):
        visit(start, [])
    return found


def test_every_layer_imports_only_itself_or_lower_layers_and_no_package_loops() -> None:
    problems = check()
    assert not problems, "\n".join(problems)


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    named = set(layers())
    assert packages | modules <= named, f"not in decode_mem/__init__'s layer list: {sorted(packages | modules - named)}"
    assert named <= packages | modules, f"listed but absent: {sorted(named - packages - modules)}"


def test_the_layers_are_read_in_the_docstring_order() -> None:
    rank = layers()
    assert rank["errors"] == rank["cli"] == 0 and rank["io"] == rank["memory"] == 1
    assert rank["model"] < rank["calibrate"] == rank["psf"] < rank["tiling"] < rank["postprocess"] < rank["footprint"]
    assert rank["footprint"] < rank["infer"] < rank["train"] < rank["plan"] == rank["fit"] < rank["pipeline"]


def _copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(PACKAGE, tmp_path / "decode_mem", ignore=shutil.ignore_patterns("__pycache__")))


def _plant(package: Path, module: str, line: str) -> None:
    path = package / module
    path.write_text(path.read_text() + f"\n\ndef _planted() -> None:\n    {line}\n")


def test_an_upward_import_planted_in_a_cli_is_reported(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    assert check(tree) == []
    _plant(tree, "calibrate/__main__.py", "from decode_mem.infer.__main__ import CAMERA_FLAGS")  # was in the tree
    problems = check(tree)
    assert problems[:2] == ["decode_mem.calibrate.__main__ imports another job's CLI: decode_mem.infer.__main__",
                            "decode_mem.calibrate.__main__ (layer calibrate) imports a higher layer: "
                            "decode_mem.infer.__main__"]
    # the loop it makes, directly (and around every package between infer and calibrate, e.g. register)
    assert "package loop: calibrate -> infer -> calibrate" in problems
    assert all(p.startswith("package loop: calibrate -> infer ->") for p in problems[2:])


def test_an_import_of_another_jobs_cli_is_reported(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    _plant(tree, "fit/__main__.py", "from decode_mem.infer.__main__ import CAMERA_FLAGS")  # fit sits above infer
    assert check(tree) == ["decode_mem.fit.__main__ imports another job's CLI: decode_mem.infer.__main__"]


def test_a_relative_upward_import_and_a_loop_within_one_layer_are_reported(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    _plant(tree, "io/stack.py", "from ..simulate import config")
    _plant(tree, "calibrate/core.py", "import decode_mem.psf.beads")  # and psf imports calibrate: a loop in one layer
    _plant(tree, "psf/beads.py", "from decode_mem.calibrate import core")
    assert set(check(tree)) == {"decode_mem.io.stack (layer io) imports a higher layer: decode_mem.simulate",
                                "package loop: calibrate -> psf -> calibrate", "package loop: io -> simulate -> io"}


def test_imports_are_resolved_absolute_relative_and_from_the_package() -> None:
    assert imported("from .plan import TilePlan\nfrom decode_mem.io import open_stack\n", ["tiling", "executor"],
                    False) == [["tiling", "plan"], ["io"]]
    assert imported("from decode_mem import io\nfrom .. import train\n", ["plan", "__main__"], False) == [
        ["io"], ["train"]]


def test_no_import_loops_between_the_modules_of_a_package() -> None:
    problems = module_loops()
    assert not problems, "\n".join(problems)


def test_a_module_loop_planted_in_a_package_is_reported(tmp_path: Path) -> None:
    package = _copy(tmp_path)
    _plant(package, "model/receptive_field.py", "from decode_mem.model.net import DecodeNet  # noqa: F401")
    assert module_loops(package) == ["module loop: model.net -> model.receptive_field -> model.net"]
