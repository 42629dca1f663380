"""Data-parallel training under torchrun (gloo on the CPU): 2 processes × batch 2 train exactly like 1 × batch 4;
one set of output files; resume under torchrun; a half-configured environment is one clear error."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from decode_mem.model.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["--preset", "tiny", "--frame_size", "16", "16", "--val_every", "100", "--log_every", "1",
         "--device", "cpu", "--threads", "1", "--quiet", "--accumulation_steps", "2", "--use_chunking",
         "--crop_size", "8", "--amp", "off"]  # fp32: 'auto' is bf16 on CPUs with native bf16, not exact


def train(out: Path, batch: int, steps: int, *, procs: int = 1,
          extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}"]
                if procs > 1 else [sys.executable])
    cmd = [*launcher, "-m", "decode_mem.train", *TRAIN, "--batch_size", str(batch), "--steps", str(steps),
           "--out", str(out), *extra]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def weights(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path)["model"]


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        scale = float(wa[name].abs().max()) or 1.0
        diff = float((wa[name].float() - wb[name].float()).abs().max())
        assert diff <= 1e-5 * scale + 1e-7, f"{name}: max |diff| {diff:.3g} (scale {scale:.3g})"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("ddp")
    paths = {"one": base / "one", "two": base / "two", "resumed": base / "resumed"}
    train(paths["one"], 4, 3)
    train(paths["two"], 2, 3, procs=2)
    train(paths["resumed"], 2, 2, procs=2, extra=("--checkpoint_every", "1"))
    shutil.copy(paths["resumed"] / "model.pt", base / "two_steps.pt")  # the 2-step model, before the resume
    train(paths["resumed"], 2, 3, procs=2, extra=("--resume",))
    return paths


def largest_change(a: Path, b: Path) -> float:
    """max over tensors of max|a - b| / max|a|: how far training moved the weights between two checkpoints."""
    wa, wb = weights(a), weights(b)
    return max(float((wa[n].float() - wb[n].float()).abs().max()) / (float(wa[n].abs().max()) or 1.0) for n in wa)


def test_two_ranks_of_batch_2_train_like_one_process_of_batch_4(runs) -> None:
    assert_same_weights(runs["one"] / "model.pt", runs["two"] / "model.pt")
    # and they trained: the third step moved the weights far beyond the equality's tolerance (1e-5 of a tensor's
    # scale), so the equality is not that of two untrained networks
    assert largest_change(runs["two"] / "model.pt", runs["two"].parent / "two_steps.pt") > 1e-3


def test_one_set_of_files_written_by_rank_0(runs) -> None:
    one = sorted(p.name for p in runs["one"].iterdir())
    two = sorted(p.name for p in runs["two"].iterdir())
    # no per-rank copies of checkpoint, model, log or plots; rank 1 keeps its own memory log
    assert two == sorted([*one, "memory_rank1.csv"])
    assert (runs["two"] / "memory_rank1.csv").read_text().startswith("elapsed_s,")
    assert load_checkpoint(runs["two"] / "model.pt")["meta"]["step"] == 3
    rows = (runs["two"] / "train_log.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 3  # header + one row per step: logged once, not once per rank


def test_resume_under_torchrun_equals_the_uninterrupted_run(runs) -> None:
    assert_same_weights(runs["two"] / "model.pt", runs["resumed"] / "model.pt")
    # it continued from step 2, not restarted (a restart gives the same weights: the data are a function of the
    # step): each rank's memory log, appended on resume, has every training step once
    for name in ("memory.csv", "memory_rank1.csv"):
        with open(runs["resumed"] / name, newline="") as fh:
            steps = [int(r["step"]) for r in csv.DictReader(fh) if r["phase"] == "train"]
        assert steps == [1, 2, 3], (name, steps)


def test_half_configured_environment_is_one_clear_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["WORLD_SIZE"] = "2"
    cmd = [sys.executable, "-m", "decode_mem.train", *TRAIN, "--batch_size", "2", "--steps", "1", "--out",
           str(tmp_path / "x")]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "WORLD_SIZE=2" in err[0] and "torchrun" in err[0] and "MASTER_ADDR" in err[0]
