"""SIGTERM during a pipeline's localization: exit 143 within seconds, one line saying where it stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.serial  # its stop is timed: no other worker's test beside it (CI's two cores were shared: 13 s)
def test_sigterm_stops_a_pipeline_cleanly(tmp_path):
    out = tmp_path / "quick"
    cmd = [sys.executable, "-m", "decode_mem.pipeline", str(REPO / "pipelines" / "quickstart.yaml"), "--out", str(out),
           "--threads", "1", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while not (out / "stack.progress").exists() and proc.poll() is None and time.monotonic() - t0 < 300:
        time.sleep(0.02)  # the localization step has begun (its journal exists)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    t_sig = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - t_sig < 5.0, err
    assert proc.returncode == 143, err
    lines = [x for x in err.splitlines() if x.startswith("stopped: stack: stopped at frame ")]
    assert len(lines) == 1 and "of 200" in lines[0], err
    assert "Traceback" not in err
