"""A speed claim for the CPU engines in the README or at the top of docs/engines.md names the CPU it was measured on
and the results file that holds it, and every ratio it gives is in that file, measured on that CPU ("2.3–3.2x torch
on an AVX2 CPU" held on one 2-core EPYC, and read as a promise on a CPU with native bf16, where it was not)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_WORDS = ("EPYC", "Xeon", "AVX2", "AVX-512", "AMX")


def _claims() -> list[tuple[str, str]]:
    """(where, paragraph) for every paragraph or list item that gives a speed ratio (``2.26x``) of an engine."""
    engines = (ROOT / "docs" / "engines.md").read_text().split("## How fast")[0]
    found = []
    for name, text in (("README.md", (ROOT / "README.md").read_text()), ("docs/engines.md", engines)):
        for block in re.split(r"\n\s*\n|\n(?=- )", text):
            if re.search(r"\d+\.\d+x", block) and re.search(r"int8|OpenVINO|ONNX|engine", block):
                found.append((name, " ".join(block.split())))
    return found


def test_every_engine_speed_claim_names_its_cpu_and_its_results_file() -> None:
    claims = _claims()
    assert claims, "no engine speed claim found: the test looks in the wrong place"
    for where, text in claims:
        files = re.findall(r"(cpu_engines[\w]*\.md)", text)
        assert files, f"{where}: {text!r} names no results file"
        report = (ROOT / "benchmarks" / "results" / files[0]).read_text()
        machine = next(line for line in report.splitlines() if line.startswith("Machine:")).lower()
        named = sorted((text.find(w), w) for w in CPU_WORDS if w in text)
        assert named, f"{where}: {text!r} names no CPU"
        first = named[0][1]  # the CPU the numbers are said to hold on: the results file's machine
        assert first.lower() in machine, f"{where}: the numbers are said to hold on {first}; {files[0]}: {machine}"
        for ratio in re.findall(r"(\d+\.\d+)x", text):
            assert f"{ratio}x" in report, f"{where}: {ratio}x is not in {files[0]}"
