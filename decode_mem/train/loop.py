"""The training loop (``fit``): simulate -> forward -> count/GMM loss -> accumulated AMP step, with
chunking, validation and atomic, resumable checkpoints; data-parallel under torchrun (``distributed``).
Read top to bottom.

Observers (a progress bar, a MemoryTracker) hook in through ``on_step``; ``fit`` itself prints nothing.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from decode_mem.config import check_output_folder, resolve_device
from decode_mem.errors import CheckpointError, ConfigError, Interrupted, Stopped
from decode_mem.io.atomic import atomic_output
from decode_mem.model.checkpoint import build_net, load_checkpoint, save_checkpoint
from decode_mem.model.loss import DecodeLoss
from decode_mem.model.net import DecodeNet, ModelConfig
from decode_mem.model.precision import emulated_bf16, resolve_amp
from decode_mem.simulate.dataset import simulate_samples
from decode_mem.train import distributed
from decode_mem.train.chunking import chunk_batch, count_crops
from decode_mem.train.config import TrainConfig
from decode_mem.train.data import SimulatedBatches, batch_loader
from decode_mem.train.distributed import Rank, rank_from_environment
from decode_mem.train.log import TrainLog
from decode_mem.train.plots import plot_training
from decode_mem.train.resume import restore_state, save_state
from decode_mem.train.sizing import check_fits, plan_for, resolve_chunk_size
from decode_mem.train.step import make_scaler, train_step
from decode_mem.train.stop import signals_deferred
from decode_mem.train.trainable import select_trainable
from decode_mem.train.validation import validate

CHECKPOINT = "checkpoint.pt"  # latest state, for --resume
MODEL = "model.pt"  # the trained model, for inference (load_model)
MEMORY_PLAN_FILE = "memory_plan.json"  # the planned peak memory of this run (decode_mem.footprint.training)

OnStep = Callable[[int, dict[str, Any]], object]  # (optimizer steps done, the step's row) -> ignored


def fit(cfg: TrainConfig, *, on_step: OnStep | None = None) -> Path:
    """Train a network as configured; returns the path of the final model (``<out>/model.pt``).

    ``on_step(step, row)`` is called after every optimizer step with the losses (and, on validation steps,
    the validation metrics): hook a progress bar or ``MemoryTracker.update`` there.
    """
    rank = rank_from_environment()  # torchrun: one of several data-parallel processes
    out = check_output_folder(cfg.out_dir)  # a read-only or file --out: one line before any work
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(cfg.device)
    if rank.distributed:
        device = distributed.start(rank, device)
    try:
        return _fit(cfg, rank, device, on_step)
    finally:
        if rank.distributed:
            distributed.stop()


def _fit(cfg: TrainConfig, rank: Rank, device: torch.device, on_step: OnStep | None) -> Path:
    out = cfg.out_dir
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    amp_dtype = resolve_amp(cfg.amp, device)
    if amp_dtype == torch.float16 and device.type != "cuda":
        raise ConfigError("train.amp fp16 is for CUDA; use bf16 (or off) on a CPU")
    if emulated_bf16(amp_dtype, device):
        warnings.warn("train.amp bf16 on a CPU without native bf16 (no AVX-512 BF16 or AMX): PyTorch then runs "
                      "the training convolutions through its slow reference kernels, many times slower than "
                      "fp32; use --amp off (or auto) on this machine", stacklevel=2)
    torch.manual_seed(cfg.seed)

    # -- model, loss, optimizer: fresh, or restored from the last checkpoint
    model_cfg = replace(cfg.model, grad_checkpointing=cfg.grad_checkpointing or cfg.model.grad_checkpointing)
    net = DecodeNet(model_cfg).to(device)
    loss_fn = DecodeLoss(cfg.loss, model_cfg)
    # the parameters that train (train.trainable: the rest frozen, or only some rows of a tensor)
    optimizer = torch.optim.AdamW(select_trainable(net, cfg.trainable, cfg.weight_decay), lr=cfg.lr,
                                  weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=cfg.lr_step, gamma=cfg.lr_gamma)
    scaler = make_scaler(device, amp_dtype)
    start = 0
    if cfg.resume and (out / CHECKPOINT).exists():
        start = restore_state(out / CHECKPOINT, cfg, net, optimizer, scheduler, scaler, device)
    elif cfg.init_from:  # fine-tuning: the weights of another model of the same architecture
        init_weights(net, cfg.init_from)
    teacher = load_teacher(cfg.teacher, net, device) if cfg.teacher else None
    model = net
    if rank.distributed:  # gradients averaged over the ranks: the step of one process with the global batch
        model = DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)

    # -- memory: the planned peak (decode_mem.footprint) chooses 'auto' crops and refuses what cannot fit
    val_size = cfg.val_size if rank.is_main else 0
    chunk = resolve_chunk_size(cfg, net, device, val_size=val_size, teacher=teacher)
    if rank.distributed:  # every rank must cut the same crops (the same number of micro-batches)
        chunk = distributed.agree(chunk)
    plan = plan_for(cfg, net, device, chunk, val_size=val_size, teacher=teacher)
    check_fits(plan, cfg.memory_limit)
    if rank.is_main:
        with atomic_output(out / MEMORY_PLAN_FILE) as tmp:
            tmp.write_text(json.dumps(plan.as_dict(), indent=1))

    # -- data: an endless simulated stream that is a pure function of (seed, step, micro-batch)
    n_micro = cfg.accumulation_steps * count_crops(cfg.simulation.frame_size, chunk)
    # simulated where it trains (on a GPU: no wait for a CPU thread), unless CPU worker processes are asked for
    stream = SimulatedBatches(cfg.simulation, cfg.batch_size, cfg.accumulation_steps, seed=cfg.seed,
                              start_step=start, size_jitter=cfg.size_jitter, rank=rank.rank,
                              world_size=rank.world_size, device=simulation_device(cfg, device))
    batches = batch_loader(stream, num_workers=cfg.num_workers, pin_memory=device.type == "cuda")
    val = simulate_samples(cfg.simulation, cfg.val_size, seed=cfg.seed) if rank.is_main else None

    log = TrainLog(out / "train_log.csv", start_step=start) if rank.is_main else None
    t0 = time.perf_counter()
    deadline = None if cfg.max_minutes is None else t0 + 60.0 * cfg.max_minutes
    done = start
    try:
        for step in range(start, cfg.steps):
            with signals_deferred():  # SIGINT/SIGTERM stop the run between steps, never inside one
                if cfg.lr_decay_to is not None:  # training on a time budget: lr falls with the time trained
                    spent = (time.perf_counter() - t0) / (60.0 * cfg.max_minutes)
                    budget_lr(optimizer, cfg, step, float(distributed.agree(spent)) if rank.distributed else spent)
                micro = (crop for _ in range(cfg.accumulation_steps)
                         for crop in chunk_batch(with_levels(next(batches), net, cfg.level_jitter), chunk))
                row: dict[str, Any] = train_step(model, loss_fn, micro, n_micro, optimizer, scaler, device=device,
                                                 amp_dtype=amp_dtype, grad_clip=cfg.grad_clip, teacher=teacher,
                                                 teacher_weight=cfg.teacher_weight)
                row.update(step=step + 1, time_s=time.perf_counter() - t0, lr=optimizer.param_groups[0]["lr"])
                scheduler.step()
                if not math.isfinite(row["loss"]):
                    raise FloatingPointError(f"training diverged at step {step + 1}: loss is {row['loss']}")
                done = step + 1
                timed_out = deadline is not None and time.perf_counter() >= deadline
                if rank.distributed and deadline is not None:  # rank 0's clock decides for all
                    timed_out = bool(distributed.agree(timed_out))
                last = done == cfg.steps or timed_out
                if rank.is_main and (done % cfg.val_every == 0 or last):  # once, not once per rank
                    row.update(validate(net, val, loss_fn, batch_size=cfg.batch_size, device=device,
                                        amp_dtype=amp_dtype, pixel_size=cfg.simulation.camera.pixel_size))
                if log is not None and (done % cfg.log_every == 0 or "jaccard" in row):
                    log.write(row)
                if on_step is not None:
                    on_step(done, row)
                if rank.is_main and (done % cfg.checkpoint_every == 0 or last):
                    save_state(out / CHECKPOINT, cfg, net, optimizer, scheduler, scaler, done)
                if last:
                    break
    except Interrupted as e:  # a checkpoint at the last whole step: the same command with --resume continues
        if rank.is_main:
            save_state(out / CHECKPOINT, cfg, net, optimizer, scheduler, scaler, done)
        raise Stopped(f"training stopped at step {done} of {cfg.steps}; the same command with --resume continues "
                      f"from {out / CHECKPOINT}", signum=e.signum, frame=done, frames=cfg.steps) from e
    finally:
        if log is not None:
            log.close()

    model_path = out / MODEL
    if rank.is_main:
        save_checkpoint(model_path, net=net, camera=cfg.simulation.camera, simulation=cfg.simulation.to_dict(),
                        step=done)
        plot_training(out / "train_log.csv", out / "training.png")  # once, at the end (never per validation)
    return model_path


def budget_lr(optimizer: torch.optim.Optimizer, cfg: TrainConfig, step: int, spent: float) -> None:
    """Set each group's lr to its StepLR value at ``step`` times ``1 − (1 − lr_decay_to)·spent`` (``spent``: the
    share of ``max_minutes`` trained): a linear decay over the time budget, which trains a budget's worth of steps
    better than a constant rate (Li et al., "Budgeted Training", ICLR 2020)."""
    factor = 1.0 - (1.0 - cfg.lr_decay_to) * min(1.0, max(0.0, spent))
    for group in optimizer.param_groups:
        group["lr"] = group["initial_lr"] * cfg.lr_gamma ** (step // cfg.lr_step) * factor


def simulation_device(cfg: TrainConfig, device: torch.device) -> torch.device:
    """Where the training windows are simulated: on the training device, or on the CPU in ``num_workers``
    DataLoader processes when they are asked for (CUDA cannot be used in forked workers)."""
    return torch.device("cpu") if cfg.num_workers > 0 else device


def init_weights(net: DecodeNet, path: str) -> None:
    """Load another checkpoint's weights into ``net``; a different architecture is a CheckpointError.

    ``sigma_photons_eps`` may differ: ``net`` keeps its own floor (the weights then give photon sigmas shifted by
    the difference until trained)."""
    state = load_checkpoint(path)
    # how to compute, not what; and the photon sigma's floor, a constant the fine-tuning re-learns around
    # (how the shipped model lost its legacy 300-photon floor: pipelines/recalibrate_photon_sigma_2d.yaml)
    same = {"grad_checkpointing": False, "sigma_photons_eps": net.config.sigma_photons_eps}
    ours = {**net.config.to_dict(), **same}
    theirs = {**ModelConfig.from_dict(state["model_config"]).to_dict(), **same}
    if theirs != ours:
        differ = {k: v for k, v in theirs.items() if ours.get(k) != v}
        raise CheckpointError(f"{path}: cannot fine-tune from it, its model differs: {differ}")
    net.load_state_dict(build_net(state, path).state_dict())


TEACHER_SAME = ("use_z", "input_transform", "input_offset", "input_scale")
"""What a teacher must share with the student: its inputs (one level per frame, computed by the student's
normalization, goes to both) and the meaning of its outputs."""


def load_teacher(path: str, net: DecodeNet, device: torch.device) -> DecodeNet:
    """The teacher of a distillation (``TrainConfig.teacher``): a trained network in eval mode without gradients;
    one that reads its inputs otherwise, or predicts z where the student does not, is a CheckpointError."""
    teacher = build_net(load_checkpoint(path), path)
    differ = {k: getattr(teacher.config, k) for k in TEACHER_SAME
              if getattr(teacher.config, k) != getattr(net.config, k)}
    if differ:
        raise CheckpointError(f"{path}: cannot teach this network, its inputs or outputs differ: {differ} (the "
                              f"network's: { {k: getattr(net.config, k) for k in differ} })")
    teacher.to(device).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


def with_levels(batch: dict[str, torch.Tensor], net: DecodeNet, jitter: float) -> dict[str, torch.Tensor]:
    """Each whole frame's level (``DecodeNet.normalize``), perturbed by ``jitter`` times the batch's own noise,
    set before the frames are cut into chunks: a level seen at inference comes from a whole (larger) frame."""
    noise = batch.pop("level_noise")
    batch["level"] = net.frame_level(batch["frames"]) + jitter * noise.to(batch["frames"].device)
    return batch
