"""Fixtures for batch inference: the shipped model, small stacks cut from the sample, a tiny random model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tifffile
from infer_helpers import DEFAULT_MODEL, SAMPLE


@pytest.fixture(scope="session")
def shipped_model() -> Path:
    if not DEFAULT_MODEL.is_file():
        pytest.skip("data/models/default_2d.pt is not there")
    return DEFAULT_MODEL


@pytest.fixture(scope="session")
def sample_frames() -> np.ndarray:
    return tifffile.imread(SAMPLE)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A 2D tiny network with random weights, saved as a real checkpoint (no training)."""
    import torch

    from decode_mem.io.camera import Camera
    from decode_mem.model.checkpoint import save_checkpoint
    from decode_mem.model.net import DecodeNet, ModelConfig
    from decode_mem.simulate.config import SimulationConfig

    torch.manual_seed(0)
    net = DecodeNet(ModelConfig.tiny(use_z=False))
    path = tmp_path_factory.mktemp("model") / "tiny.pt"
    return save_checkpoint(path, net=net, camera=Camera.emccd(), simulation=SimulationConfig().to_dict(), step=0)
