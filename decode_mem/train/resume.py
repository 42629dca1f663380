"""Training state on disk: the latest checkpoint (for ``--resume``) and restoring it into live objects."""

from __future__ import annotations

import contextlib
import os
import platform
import warnings
from pathlib import Path
from typing import Any

import torch

from decode_mem.errors import CheckpointError
from decode_mem.model.checkpoint import build_net, load_checkpoint, save_checkpoint
from decode_mem.model.net import DecodeNet
from decode_mem.train.config import TrainConfig

# what must not change between a run and its resumption (the data stream and the model depend on them)
RESUME_KEYS = ("model", "loss", "simulation", "batch_size", "accumulation_steps", "seed", "size_jitter",
               "level_jitter", "trainable")


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


def _difference(there: Any, now: Any) -> str:
    """``there`` vs ``now``, as only the entries that differ where both are mappings (a simulation section has
    dozens of entries; one or two differ)."""
    if isinstance(there, dict) and isinstance(now, dict):
        keys = [k for k in dict.fromkeys([*there, *now]) if there.get(k) != now.get(k)]
        return "; ".join(f"{k}: {_difference(there.get(k), now.get(k))}" for k in keys)
    return f"{there!r} there, {now!r} now"


def restore_state(path: Path, cfg: TrainConfig, net: DecodeNet, optimizer: torch.optim.Optimizer, scheduler: Any,
             scaler: torch.amp.GradScaler, device: torch.device) -> int:
    """Load a checkpoint into the live objects; returns the step to continue from."""
    state = load_checkpoint(path)
    train_state = state.get("train_state")
    if not train_state:
        raise CheckpointError(f"{path}: holds no training state (optimizer, step); cannot resume from it")
    saved = canonical(train_state["config"])
    now = canonical(cfg.to_dict())
    for key in RESUME_KEYS:
        if saved.get(key) != now[key]:
            raise CheckpointError(f"{path}: cannot resume, '{key}' differs from the checkpoint's "
                                  f"({_difference(saved.get(key), now[key])}). Fix: the settings it was started "
                                  f"with, or another output folder (or remove {path.parent})")
    net.load_state_dict(build_net(state, path).state_dict())
    if "optimizer" in train_state:
        optimizer.load_state_dict(train_state["optimizer"])
    else:  # a weights-only snapshot (``save_weights_snapshot``): AdamW's moments start afresh
        warnings.warn(f"{path}: a weights-only snapshot: the optimizer's moments start afresh (the step, learning "
                      "rate schedule and data stream continue)", stacklevel=2)
    scheduler.load_state_dict(train_state["scheduler"])
    if "scaler" in train_state:
        scaler.load_state_dict(train_state["scaler"])
    torch.set_rng_state(train_state["rng_cpu"])
    if train_state["rng_cuda"] and device.type == "cuda":
        torch.cuda.set_rng_state_all(train_state["rng_cuda"])
    return int(state["meta"]["step"])


def save_weights_snapshot(checkpoint: str | os.PathLike, path: str | os.PathLike) -> Path:
    """``checkpoint`` without the optimizer's and the scaler's state (a third of its size for AdamW): what a machine
    that does not have the run folder resumes from (``restore_state``: the step, schedule, data stream and weights
    continue; AdamW's moments start afresh, which costs a short re-warm-up of the effective step size)."""
    state = load_checkpoint(checkpoint)
    train_state = {k: v for k, v in state["train_state"].items() if k not in ("optimizer", "scaler")}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    torch.save({**state, "train_state": train_state}, tmp)
    os.replace(tmp, path)
    return path


def canonical(config: dict) -> dict:
    """A training config with its nested sections parsed and written back, so that fields added by a later
    version (at their defaults) do not count as a change."""
    from decode_mem.model.loss import LossConfig
    from decode_mem.model.net import ModelConfig
    from decode_mem.simulate.config import SimulationConfig

    out = dict(config)
    for key, cls in (("simulation", SimulationConfig), ("model", ModelConfig), ("loss", LossConfig)):
        if isinstance(out.get(key), dict):
            with contextlib.suppress(Exception):  # an unreadable section stays as it is and compares unequal
                out[key] = cls.from_dict(out[key]).to_dict()
    return out


def hardware(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (CUDA), torch {torch.__version__}"
    return f"{platform.machine()} CPU ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads), " \
           f"torch {torch.__version__}"


