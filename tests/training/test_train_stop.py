"""SIGTERM (a scheduler's time limit) or Ctrl-C during training: a checkpoint at the last whole step, exit 143/130
within seconds, one line saying how to continue; the same command with --resume goes on from that step."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch


def train_command(out: Path, steps: int, *extra: str) -> list[str]:
    config = out.parent / "stop.yaml"  # a checkpoint every 5 steps: the first one comes within seconds
    config.write_text("version: 1\ntrain: {checkpoint_every: 5, log_every: 1, val_every: 100000, val_size: 4}\n")
    return [sys.executable, "-m", "decode_mem.train", "--config", str(config), "--preset", "tiny", "--out", str(out),
            "--steps", str(steps), "--batch_size", "2", "--device", "cpu", "--threads", "1", "--quiet", *extra]


@pytest.mark.serial  # its stop is timed: no other worker's test beside it
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130)])  # SIGTERM: tests/inference/test_resume.py
def test_a_signal_stops_training_with_a_checkpoint_at_the_last_step(tmp_path, sig, code):
    tmp_path = tmp_path / "run"
    proc = subprocess.Popen(train_command(tmp_path, 100000), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while not (tmp_path / "checkpoint.pt").exists() and proc.poll() is None and time.monotonic() - t0 < 240:
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()
    time.sleep(1.0)  # some steps past the first checkpoint
    proc.send_signal(sig)
    t_sig = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - t_sig < 5.0, err
    assert proc.returncode == code, err
    line = [x for x in err.splitlines() if "training stopped at step" in x]
    assert len(line) == 1 and "--resume" in line[0], err
    step = int(line[0].split("training stopped at step ")[1].split()[0])
    state = torch.load(tmp_path / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert state["meta"]["step"] == step > 0  # the checkpoint holds the step the line names, not an older one
    # the same command with --resume continues from that step to the end
    more = subprocess.run(train_command(tmp_path, step + 3, "--resume"), capture_output=True, text=True, timeout=300)
    assert more.returncode == 0, more.stderr
    assert torch.load(tmp_path / "model.pt", map_location="cpu", weights_only=False)["meta"]["step"] == step + 3
