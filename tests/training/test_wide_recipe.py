"""``pipelines/train_generalist_2d_wide.yaml``: the wide generalist's recipe — DECODE's width on the shipped small
model's envelope, in pieces of at most 10 minutes that the same command continues, on a GPU or a CPU."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from decode_mem.model.checkpoint import SHIPPED_MODEL, load_checkpoint, load_model
from decode_mem.simulate.config import SimulationConfig
from decode_mem.train.config import load_train_config
from decode_mem.train.loop import CHECKPOINT, fit

RECIPE = SHIPPED_MODEL.parents[2] / "pipelines" / "train_generalist_2d_wide.yaml"


def test_the_wide_recipe_is_decode_width_on_the_shipped_envelope_in_short_resumable_pieces() -> None:
    cfg = load_train_config(RECIPE)
    assert cfg.model.features == 48 and cfg.model.inter_features == 48 and cfg.model.depth == 2
    assert cfg.max_minutes is not None and cfg.max_minutes <= 10 and cfg.resume
    assert cfg.checkpoint_every <= 100 and cfg.device == "auto"
    small = load_model(SHIPPED_MODEL)
    sim = SimulationConfig.from_dict(small.simulation)
    assert cfg.simulation.envelope() == sim.envelope()  # the same physics as the small model
    for key in ("input_transform", "input_scale", "photon_scale", "bg_param", "bg_scale", "use_z"):
        assert getattr(cfg.model, key) == getattr(small.config, key), key


def test_the_wide_recipe_runs_on_a_cpu_and_a_second_run_continues_it(tmp_path: Path) -> None:
    torch.manual_seed(0)
    cfg = load_train_config(RECIPE)
    small = replace(cfg, out=str(tmp_path / "wide"), steps=2, val_size=4, val_every=1000, log_every=1,
                    checkpoint_every=1, device="cpu", threads=1, memory_tracking=False, quiet=True,
                    simulation=replace(cfg.simulation, frame_size=(24, 24)), size_jitter=0)
    fit(small)
    assert load_checkpoint(tmp_path / "wide" / CHECKPOINT)["meta"]["step"] == 2
    steps: list[int] = []
    fit(replace(small, steps=3), on_step=lambda step, row: steps.append(step))  # the same command again
    assert steps == [3]  # resumed at step 2 (resume: true), not started over
    assert load_checkpoint(tmp_path / "wide" / CHECKPOINT)["meta"]["step"] == 3
    assert load_model(tmp_path / "wide" / "model.pt").config.features == 48
