"""The benchmark commands the README quotes run and write their report (tiny budgets: what runs, not numbers).

``benchmarks/bench_gpu.py --device cpu --quick`` with a budget that leaves room for its first step only: the
script starts, runs ``pytest -m gpu`` (skipped without CUDA), marks every later step "not run (time budget
spent)" and writes md + json + png. The steps after the first take minutes even with ``--quick`` (a 2048² movie,
end-to-end runs in fresh processes, training), so this smoke run does not reach them.

``benchmarks/bench_wide.py`` has no smoke test: it trains both real recipes (``WARM_STEPS`` = 5 warm-up steps each
at their own batch, fixed) and localizes 256² frames before it writes anything, minutes on a CPU whatever its flags.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~15-30 s: a Python start, the script's first step (a pytest collection of the gpu files)
def test_bench_gpu_quick_on_a_cpu_writes_its_report(tmp_path: Path) -> None:
    out = tmp_path / "gpu_smoke.md"
    done = subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--device", "cpu", "--quick", "--budget_s",
                           "16", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert text.startswith("# GPU check") and "--budget_s 16" in text  # the command that made it
    assert "Device: **cpu**" in text and "not measured" in text  # no GPU numbers invented on a CPU
    record = json.loads(out.with_suffix(".json").read_text())
    log = (tmp_path / "gpu_smoke_tests.log").read_text()
    assert log.startswith("$ -m pytest -q")
    # the step's own limit is 30 s at this budget: a machine loaded enough to take longer to collect the gpu
    # files gets a report that says so (rc 124), else the gpu tests' summary (all skipped without CUDA)
    if record["tests"]["rc"] == 124:
        assert log.rstrip().endswith("(timed out)") and record["tests"]["summary"] == "no summary line"
    else:
        assert record["tests"]["rc"] == 0 and "skipped" in record["tests"]["summary"], record["tests"]
    for step in ("simulate_movies", "end_to_end", "memory_rows", "speed_paths", "training"):
        assert f"{step}: not run (time budget spent)" in text, step
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
