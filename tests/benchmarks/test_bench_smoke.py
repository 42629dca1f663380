"""The benchmark commands the README quotes run and write their report (tiny budgets: what runs, not numbers).

``benchmarks/bench_gpu.py --device cpu --quick`` with a budget that leaves room for its first step only: the
script starts, runs ``pytest -m gpu`` (skipped without CUDA), marks every later step "not run (time budget
spent)" and writes md + json + png. The steps after the first take minutes even with ``--quick`` (a 2048² movie,
end-to-end runs in fresh processes, training), so this smoke run does not reach them.

``benchmarks/bench_wide.py`` with one warm-up and one timed training step of both real recipes at a batch of 2,
2 localized frames of 64², and a 2-frame reference movie at one density: every section of its report, from the
real recipes and the shipped model.
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
    assert log.startswith("$ -m pytest -v -rfE")  # each test's outcome logged as it finishes
    # the step's own limit is 30 s at this budget: a machine loaded enough to take longer to collect the gpu
    # files gets a report that says so (rc 124), else the gpu tests' summary (all skipped without CUDA)
    if record["tests"]["rc"] == 124:
        assert log.rstrip().endswith("(timed out)") and record["tests"]["summary"] == "no summary line"
    else:
        assert record["tests"]["rc"] == 0 and "skipped" in record["tests"]["summary"], record["tests"]
        assert "::" in log and " SKIPPED" in log  # named, one line per test
    for step in ("simulate_movies", "end_to_end", "memory_rows", "speed_paths", "training"):
        assert f"{step}: not run (time budget spent)" in text, step
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # 5.4 min at load ~11 on 2 cores: a Python start, 2 + 2 training steps and 4 + 2 tiny
# localizations, each planned by the footprint tracer (the real path: no size is given)
def test_bench_wide_tiny_writes_every_section_of_its_report(tmp_path: Path) -> None:
    out = tmp_path / "wide_smoke.md"
    done = subprocess.run([sys.executable, "benchmarks/bench_wide.py", "--steps", "1", "--warm_steps", "1", "--batch",
                           "2", "--frames", "2", "--size", "64", "--reference_frames", "2", "--densities", "1", "--out",
                           str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert text.startswith("# The wide generalist against the small one")
    assert "--warm_steps 1" in text and "--size 64" in text and "Device: cpu" in text  # the command that made it
    assert "localization frames/s (64 x 64)" in text
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith(("| small |", "| wide |")):
            rows[cells[0]] = cells
    # the recipes' own widths (pipelines/train_generalist_2d_*.yaml) at the batch asked for, speeds measured
    assert [rows["small"][1], rows["wide"][1]] == ["16", "48"] and rows["small"][2] == rows["wide"][2] == "2"
    assert all(float(rows[m][k]) > 0 for m in rows for k in (3, 4)), rows
    assert "Its recipe's 30000 steps would take" in text  # the wide recipe's schedule, from its file
    assert "2 frames of 64 x 64" in text
    precision = [line.split("|")[1:5] for line in text.splitlines() if line.startswith("| 1 |")]
    assert [(d.strip(), a.strip()) for d, a, _, _ in precision] == [("1", "bf16"), ("1", "off")]
    assert all(0.0 <= float(j) <= 1.0 for _, _, j, _ in precision), precision
    assert "Largest Jaccard difference between the two:" in text and "![wide_model](wide_smoke.png)" in text
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # ~10-20 s: two fresh processes, each a model load and 6 frames of 64²
@pytest.mark.parametrize("reuse", [True, False])
def test_bench_throughput_engine_row_runs_both_paths(tmp_path: Path, reuse: bool) -> None:
    """One row of ``bench_throughput``'s engine grid (its ``--worker``), with the executor's feature reuse on and
    off (the DECODE-style path it switches off by wrapping the executor): the row's JSON, not an error (a grid
    whose every row failed once went unnoticed until the benchmark ran)."""
    import numpy as np
    import tifffile

    movie = tmp_path / "movie.tif"
    tifffile.imwrite(movie, np.random.default_rng(0).poisson(120, (6, 64, 64)).astype(np.uint16))
    spec = {"movie": str(movie), "model": str(ROOT / "data" / "models" / "default_2d.pt"), "chunk": 64,
            "precision": "fp32", "reuse": reuse, "device": "cpu", "threads": 1, "memory_limit_gib": 4.0}
    done = subprocess.run([sys.executable, "benchmarks/bench_throughput.py", "--worker", json.dumps(spec)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["frames"] == 6 and row["seconds"] > 0 and row["tiles"] == 1


@pytest.mark.slow  # ~20-40 s: a Python start, the sgemm peak (3 s) and a few units of the network at 256²
def test_bench_cpu_engines_network_part_writes_its_report(tmp_path: Path) -> None:
    """The network part alone (the whole command and physics skipped, said so): GFLOP/s beside the measured sgemm
    peak for every engine installed here, of the model ``--model`` names, and the record re-renders to the same
    report."""
    out = tmp_path / "cpu_engines.md"
    done = subprocess.run([sys.executable, "benchmarks/bench_cpu_engines.py", "--threads", "1", "--sizes", "256",
                           "--frames", "0", "--frames-2048", "0", "--physics-frames", "0", "--repeats", "1",
                           "--model", "data/models/narrow_2d.pt", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert "Model: data/models/narrow_2d.pt." in text
    missing = subprocess.run([sys.executable, "benchmarks/bench_cpu_engines.py", "--threads", "1", "--sizes", "256",
                              "--frames", "0", "--frames-2048", "0", "--physics-frames", "0", "--repeats", "1",
                              "--model", str(tmp_path / "none.pt"), "--out", str(tmp_path / "none.md")],
                             cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert missing.returncode != 0 and "none.pt" in missing.stderr  # the network part loads the model it is given
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["peak_gflops"]["1"] > 1 and all(r["peak_fraction"] > 0 for r in record["network"])
    assert "| 256² | 256² (1) | 1 | torch |" in text and "of the peak of its precision" in text
    assert "The whole command: not run" in text and "Accuracy on simulated physics: not run" in text
    assert out.with_suffix(".png").stat().st_size > 10_000
    again = tmp_path / "again.md"
    subprocess.run([sys.executable, "benchmarks/bench_cpu_engines.py", "--render", str(out.with_suffix(".json")),
                    "--out", str(again)], cwd=ROOT, check=True, capture_output=True, timeout=120)
    assert again.read_text().replace("again", "cpu_engines") == text
