"""A weights-only snapshot (what a machine without the run folder resumes from): a third of the checkpoint's size
for AdamW, and training continues from its step with its weights, schedule and data stream; only the optimizer's
moments start afresh."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from decode_mem.model.checkpoint import load_checkpoint
from decode_mem.train.config import TrainConfig
from decode_mem.train.loop import CHECKPOINT, fit
from decode_mem.train.resume import save_weights_snapshot


def test_training_continues_from_a_weights_only_snapshot(tiny_cfg: TrainConfig, tmp_path: Path) -> None:
    first = Path(tiny_cfg.out)
    fit(replace(tiny_cfg, steps=2))
    snapshot = save_weights_snapshot(first / CHECKPOINT, tmp_path / "snap" / "wide_snapshot.pt")
    state = load_checkpoint(snapshot)
    assert "optimizer" not in state["train_state"] and state["meta"]["step"] == 2
    assert snapshot.stat().st_size < 0.6 * (first / CHECKPOINT).stat().st_size  # AdamW: two moments per weight
    # another machine: a fresh run folder holding only the snapshot as its checkpoint
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(snapshot, other / CHECKPOINT)
    trained: list[int] = []
    with pytest.warns(UserWarning, match="weights-only snapshot"):
        fit(replace(tiny_cfg, out=str(other), resume=True), on_step=lambda step, row: trained.append(step))
    assert trained == [3, 4]  # continued at the snapshot's step, not restarted
    after = load_checkpoint(other / CHECKPOINT)
    assert after["meta"]["step"] == 4 and "optimizer" in after["train_state"]  # the next checkpoints are whole
