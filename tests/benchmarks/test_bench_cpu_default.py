"""bench_cpu_default's torch share of the fixed cost: read from a real ``python -X importtime`` run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_torch_import_seconds_reads_torchs_cumulative_time_wherever_it_was_imported():
    from bench_cpu_default import torch_import_seconds

    code = "import json; import decode_mem.tiling.grid; import torch"  # torch under another module or first
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                          check=True)
    seconds = torch_import_seconds(done.stderr)
    assert seconds is not None and 0.0 < seconds < 60.0
    total = sum(int(line.split("|")[1]) for line in done.stderr.splitlines()
                if line.startswith("import time:") and "cumulative" not in line
                and not line.split("|")[2].startswith("  "))  # the top-level imports' cumulative times
    assert seconds <= total / 1e6  # a part of the imports, not more than all of them
    assert torch_import_seconds(subprocess.run([sys.executable, "-X", "importtime", "-c", "import json"],
                                               capture_output=True, text=True, check=True).stderr) is None
