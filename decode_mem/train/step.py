"""One optimizer step: k accumulated micro-batches (crops) under one AMP path. Benchmarks import this."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import nullcontext

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from decode_mem.model.loss import LossTerms, detection_distillation
from decode_mem.model.precision import autocast

Batch = dict[str, torch.Tensor]


def make_scaler(device: torch.device, amp_dtype: torch.dtype | None) -> torch.amp.GradScaler:
    """A GradScaler that is active only for fp16 (bf16 has fp32's range and needs none)."""
    return torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)


def to_device(batch: Batch, device: torch.device) -> Batch:
    # pinned host memory + non_blocking lets the copy overlap with compute on CUDA; a no-op on CPU
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def train_step(
    model: nn.Module,
    loss_fn: Callable[..., LossTerms],
    micro_batches: Iterable[Batch],
    n_micro: int,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    *,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    grad_clip: float | None,
    teacher: nn.Module | None = None,
    teacher_weight: float = 1.0,
) -> dict[str, float]:
    """Accumulate gradients over ``n_micro`` micro-batches, then clip and step once.

    Each micro-batch's loss is divided by ``n_micro`` so the accumulated gradient equals the gradient of
    the mean loss over all of them: k micro-batches of size b give the same step as one batch of k·b.
    Only one micro-batch is on the device at a time, so device memory is set by the micro-batch (crop).
    A ``DistributedDataParallel`` model averages the gradients over the ranks once, after the last micro-batch
    (``no_sync`` before it).
    ``teacher``: a trained network (eval mode, no gradients) whose detections the loss also follows, weighted
    by ``teacher_weight`` (``model.loss.detection_distillation``); logged as ``distill``.
    """
    model.train()
    sums = torch.zeros(5, device=device)
    seen = 0
    for batch in micro_batches:
        batch = to_device(batch, device)
        defer = isinstance(model, DistributedDataParallel) and seen < n_micro - 1
        with model.no_sync() if defer else nullcontext():
            inputs = dict(read_var=batch.get("read_var"), level=batch.get("level"), **_place(batch))
            with autocast(device, amp_dtype):
                output = model(batch["frames"], **inputs)
            terms = loss_fn(output, batch["em"], batch["mask"], batch["bg"])  # fp32 inside
            total, distill = terms.total, torch.zeros((), device=device)
            if teacher is not None:
                with torch.no_grad(), autocast(device, amp_dtype):
                    teacher_output = teacher(batch["frames"], **inputs)
                distill = detection_distillation(output, teacher_output)
                total = total + teacher_weight * distill
            scaler.scale(total / n_micro).backward()
        sums += torch.stack([total, terms.count, terms.loc, terms.bg, distill]).detach() / n_micro
        seen += 1
    if seen != n_micro:
        raise RuntimeError(f"train_step: expected {n_micro} micro-batches, got {seen}")
    scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
    norm = nn.utils.clip_grad_norm_(model.parameters(), grad_clip if grad_clip else float("inf"))
    scaler.step(optimizer)  # skipped by the scaler if fp16 gradients overflowed
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    total, count, loc, bg, distill = sums.tolist()
    row = {"loss": total, "count": count, "loc": loc, "bg": bg, "grad_norm": float(norm)}
    if teacher is not None:
        row["distill"] = distill
    return row


def _place(batch: Batch) -> dict[str, torch.Tensor]:
    """``origin=`` for a batch of windows of a PSF that changes across the field (the network's place input);
    nothing otherwise, so any model's forward takes it."""
    return {"origin": batch["origin"]} if "origin" in batch else {}
