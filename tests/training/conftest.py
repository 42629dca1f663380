from __future__ import annotations

import pytest

from decode_mem.model.net import ModelConfig
from decode_mem.simulate.config import SimulationConfig
from decode_mem.train.config import TrainConfig


@pytest.fixture
def tiny_cfg(tmp_path) -> TrainConfig:
    """A training run small enough for CI: tiny net, 16x16 frames, a handful of steps."""
    return TrainConfig(out=str(tmp_path / "run"), steps=4, batch_size=2, accumulation_steps=1, val_every=2, val_size=4,
                       log_every=1,
                       checkpoint_every=2, lr=1e-3, quiet=True, memory_tracking=False,
                       model=ModelConfig.tiny(), simulation=SimulationConfig(frame_size=(16, 16), density=2.0))
