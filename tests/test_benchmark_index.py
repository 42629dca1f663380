"""benchmarks/README.md indexes every benchmark script with its reports (``python benchmarks/make_index.py``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _make_index():
    spec = importlib.util.spec_from_file_location("make_index", ROOT / "benchmarks" / "make_index.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_benchmark_script_has_a_section() -> None:
    text = (ROOT / "benchmarks" / "README.md").read_text()
    for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        assert f"## {script.name}" in text, f"{script.name} missing: run python benchmarks/make_index.py"


def test_stale_marks_name_existing_reports() -> None:
    index = _make_index()
    for name in index.STALE:
        assert (ROOT / "benchmarks" / "results" / name).is_file(), name


def test_commit_and_machine_are_read_from_the_report(tmp_path: Path) -> None:
    index = _make_index()
    text = ("Command: `python benchmarks/bench_x.py`\nMachine: AMD EPYC, 2 cores (avx2); 1 torch thread; "
            "python 3.11.7; decode_mem at 0000000.\n")
    report = tmp_path / "x.md"
    report.write_text(text)
    assert index.made_by(report) == "bench_x.py"
    assert index.recorded_machine(text) == "AMD EPYC, 2 cores (avx2)"
    assert "not in this history" in index.recorded_commit(text)  # 0000000 is no commit here
    assert index.recorded_commit("no commit named") == "not recorded"
    assert index.recorded_machine("nothing") == "not recorded"
