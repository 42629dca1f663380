"""``serial`` tests (tests/conftest.py) run with no test of another xdist worker beside them, and the others still
run two at a time: a small suite with this conftest on two workers, each test recording when it ran."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parent / "conftest.py"

RECORD = textwrap.dedent("""
    import json, os, time
    from pathlib import Path

    import pytest


    def run(name, seconds):
        start = time.monotonic()
        time.sleep(seconds)
        line = {"name": name, "start": start, "end": time.monotonic(), "worker": os.environ["PYTEST_XDIST_WORKER"]}
        with open(Path(os.environ["SPANS"]), "a") as fh:
            fh.write(json.dumps(line) + "\\n")
""")


@pytest.mark.serial  # its spans are timed: no other worker's test beside it
def test_serial_tests_run_alone_and_the_others_in_parallel(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(CONFTEST, suite / "conftest.py")
    (suite / "record.py").write_text(RECORD)
    for name in ("a", "b", "c"):  # three files of parallel tests, one of which holds two serial ones
        body = "from record import run\nimport pytest\n\n"
        body += "".join(f"\ndef test_{name}{i}():\n    run('{name}{i}', 0.4)\n\n" for i in range(4))
        if name == "b":
            body += "".join(f"\n@pytest.mark.serial\ndef test_serial{i}():\n    run('serial{i}', 0.6)\n\n"
                            for i in range(2))
        (suite / f"test_{name}.py").write_text(body)
    spans = tmp_path / "spans.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # not this run's workers
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                           "loadfile", "-o", "markers=serial: alone", "--rootdir", str(suite), str(suite)],
                          env={**env, "SPANS": str(spans), "PYTHONPATH": str(suite)}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = [json.loads(line) for line in spans.read_text().splitlines()]
    assert len(ran) == 14 and {r["worker"] for r in ran} == {"gw0", "gw1"}

    def overlap(p: dict, q: dict) -> bool:
        return p["worker"] != q["worker"] and p["start"] < q["end"] and q["start"] < p["end"]

    serial = [r for r in ran if r["name"].startswith("serial")]
    others = [r for r in ran if not r["name"].startswith("serial")]
    assert not [(s["name"], o["name"]) for s in serial for o in others if overlap(s, o)]
    # the others did run two at a time (so the serial ones were kept apart, not the whole run made serial)
    assert any(overlap(p, q) for p in others for q in others)
