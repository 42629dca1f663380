"""bench_cpu_default: the torch share of the fixed cost (read from a real ``python -X importtime`` run) and the
idle goal's split of the whole command's excess over the network."""

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


def test_the_idle_goal_splits_the_whole_commands_excess_into_the_loops_and_the_fixed_cost(tmp_path):
    import json
    import re

    from bench_cpu_default import report

    rec = json.loads((Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "cpu_default.json").read_text())
    tl = rec["timeline"]
    tl.update(process_wall_s=10.9, loop_s=10.5, network_s=10.0, frames=400)  # 9 % = 5 % loop + 4 % fixed
    report(rec, tmp_path / "r.md")
    line = next(s for s in (tmp_path / "r.md").read_text().splitlines() if s.startswith("- No idle stage"))
    shares = [int(v) for v in re.findall(r"(\d+) %", line)]  # whole, the goal, the loop's, the fixed cost's
    assert shares == [9, 10, 5, 4], line
    assert ": met." in line and "0.40 s here" in line and "400-frame movie" in line
