"""Training state on disk: the latest checkpoint (for ``--resume``) and restoring it into live objects."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch

from decode_mem.errors import CheckpointError
from decode_mem.model.checkpoint import build_net, load_checkpoint, save_checkpoint
from decode_mem.model.net import DecodeNet
from decode_mem.train.config import TrainConfig

# what must not change between a run and its resumption (the data stream and the model depend on them)
RESUME_KEYS = ("model", "loss", "simulation", "batch_size", "accumulation_steps", "seed", "size_jitter",
               "level_jitter")


def save_state(path: Path, cfg: TrainConfig, net: DecodeNet, optimizer: torch.optim.Optimizer,
          scheduler: Any, scaler: torch.amp.GradScaler, step: int) -> None:
    train_state = {
        "config": cfg.to_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "rng_cpu": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
        "hardware": hardware(next(net.parameters()).device),
    }
    save_checkpoint(path, net=net, camera=cfg.simulation.camera, simulation=cfg.simulation.to_dict(),
                    step=step, train_state=train_state)


def restore_state(path: Path, cfg: TrainConfig, net: DecodeNet, optimizer: torch.optim.Optimizer, scheduler: Any,
             scaler: torch.amp.GradScaler, device: torch.device) -> int:
    """Load a checkpoint into the live objects; returns the step to continue from."""
    state = load_checkpoint(path)
    train_state = state.get("train_state")
    if not train_state:
        raise CheckpointError(f"{path}: holds no training state (optimizer, step); cannot resume from it")
    saved = train_state["config"]
    for key in RESUME_KEYS:
        if saved.get(key) != cfg.to_dict()[key]:
            raise CheckpointError(f"{path}: cannot resume, '{key}' differs from the checkpoint's "
                                  f"({saved.get(key)!r} there, {cfg.to_dict()[key]!r} now)")
    net.load_state_dict(build_net(state, path).state_dict())
    optimizer.load_state_dict(train_state["optimizer"])
    scheduler.load_state_dict(train_state["scheduler"])
    scaler.load_state_dict(train_state["scaler"])
    torch.set_rng_state(train_state["rng_cpu"])
    if train_state["rng_cuda"] and device.type == "cuda":
        torch.cuda.set_rng_state_all(train_state["rng_cuda"])
    return int(state["meta"]["step"])


def hardware(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (CUDA), torch {torch.__version__}"
    return f"{platform.machine()} CPU ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads), " \
           f"torch {torch.__version__}"


