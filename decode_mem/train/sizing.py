"""Training sizes against memory: ``crop_size='auto'`` (the largest aligned crop whose planned peak fits the
budget) and the check that refuses settings that cannot fit, both from ``decode_mem.footprint``'s training plan.

Sizes chosen here keep ``PLAN_HEADROOM`` of the budget free, as inference's automatic sizes do: identical training
runs peak differently (glibc's heap; the training rows of ``benchmarks/results/memory_table.md`` show the error).
Sizes the user gives are refused only when their plan exceeds the budget itself."""

from __future__ import annotations

from dataclasses import replace

import torch

from decode_mem.errors import ConfigError
from decode_mem.footprint.choose import memory_budget, rss_anon_bytes, with_headroom
from decode_mem.footprint.inference import MiB
from decode_mem.footprint.training import TrainingPlan, plan_training
from decode_mem.model.net import DecodeNet
from decode_mem.train.config import TrainConfig

CHUNKS = (1024, 512, 256, 128, 64, 32)  # crop sides tried below the frame, largest first


def resolve_chunk_size(cfg: TrainConfig, net: DecodeNet, device: torch.device, *, val_size: int | None = None,
                       baseline_bytes: int | None = None, teacher: DecodeNet | None = None) -> int | None:
    """Crop side for training, or None when chunking is off (whole frames). ``'auto'``: the largest aligned
    crop (the frame itself first) whose plan fits ``memory_budget``'s modest default (counted above
    ``baseline_bytes``) or ``cfg.memory_limit``, less ``PLAN_HEADROOM`` (``with_headroom``); the smallest candidate
    where none fits (``check_fits`` then says why)."""
    if not cfg.use_chunking:
        return None
    factor = net.downsample_factor
    if cfg.crop_size != "auto":
        return _aligned(int(cfg.crop_size), factor)
    side = max(cfg.simulation.frame_size)
    candidates = [_aligned(side, factor)] + [c for c in CHUNKS if c < side and c >= 4 * factor]
    baseline = rss_anon_bytes() if baseline_bytes is None else baseline_bytes
    budget = with_headroom(memory_budget(device, cfg.memory_limit, baseline_bytes=baseline)[0], baseline, device)
    for chunk in candidates:
        if plan_for(cfg, net, device, chunk, val_size=val_size, baseline_bytes=baseline,
                    teacher=teacher).need_bytes <= budget:
            return chunk
    return candidates[-1]


def plan_for(cfg: TrainConfig, net: DecodeNet, device: torch.device, chunk: int | None, *,
             val_size: int | None = None, baseline_bytes: int | None = None,
             teacher: DecodeNet | None = None) -> TrainingPlan:
    """The training plan of ``cfg`` with crops of ``chunk`` px (None: whole frames) on ``device``, with the
    distillation's ``teacher`` where there is one."""
    return plan_training(net, cfg.simulation, batch_size=cfg.batch_size, chunk_size=chunk, teacher=teacher,
                         accumulation_steps=cfg.accumulation_steps,
                         val_size=cfg.val_size if val_size is None else val_size, amp=cfg.amp, device=device,
                         baseline_bytes=rss_anon_bytes() if baseline_bytes is None else baseline_bytes)


def fitting_batch(cfg: TrainConfig, net: DecodeNet, device: torch.device, *,
                  baseline_bytes: int | None = None) -> TrainConfig:
    """``cfg`` with the largest ``batch_size`` (halving it, the accumulation growing to keep the effective batch)
    whose plan fits ``cfg.memory_limit`` or, without one, what the machine has, less ``PLAN_HEADROOM``
    (``with_headroom``); batch 1 where none fits (``fit`` then refuses it). For a job that chooses its own training
    sizes (``decode_mem.fit``'s fine-tuning)."""
    baseline = rss_anon_bytes() if baseline_bytes is None else baseline_bytes
    budget = with_headroom(memory_budget(device, cfg.memory_limit, modest=False)[0], baseline, device)
    effective = cfg.batch_size * cfg.accumulation_steps
    batch = cfg.batch_size
    while True:
        candidate = replace(cfg, batch_size=batch, accumulation_steps=-(-effective // batch))
        chunk = resolve_chunk_size(candidate, net, device, baseline_bytes=baseline)
        if batch == 1 or plan_for(candidate, net, device, chunk, baseline_bytes=baseline).need_bytes <= budget:
            return candidate
        batch //= 2


def check_fits(plan: TrainingPlan, memory_limit: int | None) -> None:
    """Refuse (ConfigError) a training run whose planned peak exceeds ``memory_limit``, or, without one, what
    the machine has (free device memory on CUDA, available host memory and this process's on a CPU)."""
    device = torch.device(plan.device)
    budget, kind = memory_budget(device, memory_limit, modest=False)
    if plan.need_bytes <= budget:
        return
    where = "device memory" if device.type == "cuda" else "host memory (RssAnon)"
    h, w = plan.frame_shape
    crop = "whole frames" if plan.crop_shape == plan.frame_shape else \
        f"crops of {plan.crop_shape[0]}x{plan.crop_shape[1]} px"
    raise ConfigError(
        f"training needs about {plan.need_bytes / MiB:.0f} MiB of {where} (batch_size {plan.batch_size} windows "
        f"of {h}x{w} px, {crop}, amp {plan.amp}; a training step {plan.train_bytes / MiB:.0f} MiB, validation on "
        f"whole frames {plan.validation_bytes / MiB:.0f} MiB), more than {budget / MiB:.0f} MiB ({kind}); use "
        "--use_chunking with a smaller --crop_size (or 'auto'), or a smaller --batch_size with "
        "--accumulation_steps to keep the effective batch")


def _aligned(size: int, multiple: int) -> int:
    return max(multiple, size // multiple * multiple)
