"""``train.lr_decay_to``: on a time budget (``max_minutes``) the learning rate falls linearly with the time trained."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

from decode_mem.errors import ConfigError
from decode_mem.train.config import TrainConfig
from decode_mem.train.loop import budget_lr


def _optimizer(cfg: TrainConfig) -> torch.optim.Optimizer:
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=cfg.lr)
    torch.optim.lr_scheduler.StepLR(opt, step_size=cfg.lr_step, gamma=cfg.lr_gamma)  # sets initial_lr
    return opt


def test_the_rate_falls_linearly_over_the_budget_on_top_of_steplr() -> None:
    cfg = TrainConfig(lr=1e-3, lr_step=100, lr_gamma=0.5, max_minutes=10.0, lr_decay_to=0.1)
    opt = _optimizer(cfg)
    for step, spent, expected in ((0, 0.0, 1e-3), (0, 0.5, 1e-3 * 0.55), (150, 0.5, 5e-4 * 0.55),
                                  (0, 1.0, 1e-4), (0, 3.0, 1e-4)):
        budget_lr(opt, cfg, step, spent)
        assert opt.param_groups[0]["lr"] == pytest.approx(expected), (step, spent)


def test_lr_decay_to_needs_a_time_budget_and_a_fraction() -> None:
    with pytest.raises(ConfigError, match="set max_minutes"):
        TrainConfig(lr_decay_to=0.1)
    with pytest.raises(ConfigError, match=r"lr_decay_to must be in \[0, 1\]"):
        TrainConfig(max_minutes=1.0, lr_decay_to=1.5)


def test_a_budgeted_run_logs_a_falling_rate(tmp_path) -> None:
    import csv

    from decode_mem.model.config import ModelConfig
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.train.loop import fit

    cfg = TrainConfig(out=str(tmp_path / "run"), steps=10**6, batch_size=2, accumulation_steps=1, max_minutes=0.05,
                      lr_decay_to=0.0, lr_step=10**6, val_size=2, val_every=10**6, log_every=1,
                      checkpoint_every=10**6, memory_tracking=False, quiet=True, threads=1, size_jitter=0,
                      model=ModelConfig(depth=1, features=4, inter_features=4),
                      simulation=SimulationConfig(frame_size=(16, 16)))
    fit(cfg)
    with open(tmp_path / "run" / "train_log.csv") as fh:
        rates = [float(r["lr"]) for r in csv.DictReader(fh)]
    assert len(rates) >= 3 and rates[0] == pytest.approx(cfg.lr, rel=0.2)
    assert all(b <= a for a, b in pairwise(rates)) and rates[-1] < 0.5 * cfg.lr
