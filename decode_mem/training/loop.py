"""The training loop (``fit``): simulate -> forward -> count/GMM loss -> accumulated AMP step, with
chunking, validation, memory tracking and atomic, resumable checkpoints. Read top to bottom."""

from __future__ import annotations

import csv
import math
import os
import platform
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from decode_mem.config import resolve_device
from decode_mem.errors import CheckpointError, ConfigError
from decode_mem.memory import MemoryTracker
from decode_mem.model.checkpoint import build_net, load_checkpoint, save_checkpoint
from decode_mem.model.loss import DecodeLoss
from decode_mem.model.net import DecodeNet
from decode_mem.simulate.dataset import simulate_samples
from decode_mem.training.chunking import chunk_batch, count_crops
from decode_mem.training.config import TrainConfig
from decode_mem.training.data import SimulatedBatches, batch_loader
from decode_mem.training.plots import plot_training
from decode_mem.training.sizing import resolve_chunk_size
from decode_mem.training.step import AMP_DTYPES, make_scaler, train_step
from decode_mem.training.validation import validate

CHECKPOINT = "checkpoint.pt"  # latest state, for --resume
MODEL = "model.pt"  # the trained model, for inference (load_model)
LOG_COLUMNS = ("step", "time_s", "lr", "loss", "count", "loc", "bg", "grad_norm", "val_loss", "val_count",
               "val_loc", "val_bg", "jaccard", "recall", "precision", "rmse_lat", "rmse_ax")


def resolve_amp(cfg: TrainConfig, device: torch.device) -> torch.dtype | None:
    """AMP dtype, or None for fp32. Default: on with CUDA, off on CPU."""
    use_amp = cfg.use_amp if cfg.use_amp is not None else device.type == "cuda"
    if not use_amp:
        return None
    if cfg.amp_dtype == "fp16" and device.type == "cpu":
        raise ConfigError("train.amp_dtype fp16 is for CUDA; use bf16 on CPU")
    return AMP_DTYPES[cfg.amp_dtype]


def fit(cfg: TrainConfig) -> Path:
    """Train a network as configured; returns the path of the final model (``<out>/model.pt``)."""
    out = cfg.out_dir
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(cfg.device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    amp_dtype = resolve_amp(cfg, device)
    torch.manual_seed(cfg.seed)

    # -- model, loss, optimizer: fresh, or restored from the last checkpoint
    model_cfg = replace(cfg.model, grad_checkpointing=cfg.grad_checkpointing or cfg.model.grad_checkpointing)
    net = DecodeNet(model_cfg).to(device)
    loss_fn = DecodeLoss(cfg.loss, model_cfg)
    optimizer = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=cfg.lr_step, gamma=cfg.lr_gamma)
    scaler = make_scaler(device, amp_dtype)
    start = 0
    if cfg.resume and (out / CHECKPOINT).exists():
        start = _restore(out / CHECKPOINT, cfg, net, optimizer, scheduler, scaler, device)

    # -- data: an endless simulated stream that is a pure function of (seed, step, micro-batch)
    chunk = resolve_chunk_size(cfg, net, device)
    n_micro = cfg.accumulation_steps * count_crops(cfg.simulation.frame_size, chunk)
    stream = SimulatedBatches(cfg.simulation, cfg.batch_size, cfg.accumulation_steps, seed=cfg.seed,
                              start_step=start, size_jitter=cfg.size_jitter)
    batches = batch_loader(stream, num_workers=cfg.num_workers, pin_memory=device.type == "cuda")
    val = simulate_samples(cfg.simulation, cfg.val_size, seed=cfg.seed)

    tracker = MemoryTracker(cfg.memory_log_path, log_interval=cfg.log_every, device=device,
                            mode="a" if start else "w") if cfg.memory_tracking else None
    log = _Log(out / "train_log.csv", start_step=start)
    t0 = time.perf_counter()
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc="train", disable=cfg.quiet,
               unit="step")
    for step in bar:
        micro = (crop for _ in range(cfg.accumulation_steps)
                 for crop in chunk_batch(with_levels(next(batches), net, cfg.level_jitter), chunk))
        row: dict[str, Any] = train_step(net, loss_fn, micro, n_micro, optimizer, scaler, device=device,
                                         amp_dtype=amp_dtype, grad_clip=cfg.grad_clip)
        row.update(step=step + 1, time_s=time.perf_counter() - t0, lr=scheduler.get_last_lr()[0])
        scheduler.step()
        if not math.isfinite(row["loss"]):
            raise FloatingPointError(f"training diverged at step {step + 1}: loss is {row['loss']}")
        done = step + 1
        if done % cfg.val_every == 0 or done == cfg.steps:
            row.update(validate(net, val, loss_fn, batch_size=cfg.batch_size, device=device, amp_dtype=amp_dtype,
                                pixel_size=cfg.simulation.camera.pixel_size))
        if tracker is not None:
            tracker.update(step=done, phase="train")
        if done % cfg.log_every == 0 or "jaccard" in row:
            log.write(row)
            bar.set_postfix(loss=f"{row['loss']:.3g}", count=f"{row['count']:.3g}",
                            **({"jaccard": f"{row['jaccard']:.3f}"} if "jaccard" in row else {}))
        if done % cfg.checkpoint_every == 0 or done == cfg.steps:
            _save(out / CHECKPOINT, cfg, net, optimizer, scheduler, scaler, done)
    bar.close()
    log.close()

    model_path = save_checkpoint(out / MODEL, net=net, camera=cfg.simulation.camera,
                                 simulation=cfg.simulation.to_dict(), step=cfg.steps)
    # plots once, at the end (never per validation)
    plot_training(out / "train_log.csv", out / "training.png")
    if tracker is not None:
        tracker.update(step=cfg.steps, phase="end", force_log=True)
        tracker.plot_history(out / "memory.png")
        tracker.check_leak()
        tracker.close()
    return model_path


def with_levels(batch: dict[str, torch.Tensor], net: DecodeNet, jitter: float) -> dict[str, torch.Tensor]:
    """Each whole frame's level (``DecodeNet.normalize``), perturbed by ``jitter`` times the batch's own noise,
    set before the frames are cut into chunks: a level seen at inference comes from a whole (larger) frame."""
    noise = batch.pop("level_noise")
    batch["level"] = net.frame_level(batch["frames"]) + jitter * noise.to(batch["frames"].device)
    return batch


def _save(path: Path, cfg: TrainConfig, net: DecodeNet, optimizer: torch.optim.Optimizer,
          scheduler: Any, scaler: torch.amp.GradScaler, step: int) -> None:
    train_state = {
        "config": cfg.to_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "rng_cpu": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
        "hardware": _hardware(next(net.parameters()).device),
    }
    save_checkpoint(path, net=net, camera=cfg.simulation.camera, simulation=cfg.simulation.to_dict(),
                    step=step, train_state=train_state)


def _restore(path: Path, cfg: TrainConfig, net: DecodeNet, optimizer: torch.optim.Optimizer, scheduler: Any,
             scaler: torch.amp.GradScaler, device: torch.device) -> int:
    """Load a checkpoint into the live objects; returns the step to continue from."""
    state = load_checkpoint(path)
    train_state = state.get("train_state")
    if not train_state:
        raise CheckpointError(f"{path}: holds no training state (optimizer, step); cannot resume from it")
    saved = train_state["config"]
    for key in ("model", "loss", "simulation", "batch_size", "accumulation_steps", "seed"):
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


def _hardware(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (CUDA), torch {torch.__version__}"
    return f"{platform.machine()} CPU ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads), " \
           f"torch {torch.__version__}"


class _Log:
    """CSV of training and validation rows (a log: appended and flushed row by row)."""

    def __init__(self, path: Path, *, start_step: int) -> None:
        kept = []
        if start_step and path.exists():  # a resumed run drops rows logged after its checkpoint
            with open(path, newline="") as fh:
                kept = [r for r in csv.DictReader(fh) if int(r["step"]) <= start_step]
        self._fh = open(path, "w", newline="")  # noqa: SIM115 - a log kept open for the run
        self._writer = csv.DictWriter(self._fh, LOG_COLUMNS, extrasaction="ignore")
        self._writer.writeheader()
        self._writer.writerows(kept)

    def write(self, row: dict[str, Any]) -> None:
        self._writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()
