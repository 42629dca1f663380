"""Predicted peak memory of a training run, from the network's shape, the batch and the crop, before anything runs.

Host (RssAnon) = the process's baseline (Python, torch, the model and its optimizer, measured by the caller)
+ simulated batches in flight (``BATCHES_IN_FLIGHT`` whole-frame batches: the one being cut into crops, the
  next one being simulated, and the transient copy that stacks its samples)
+ the validation set (``val_size`` windows, simulated once and kept)
+ on a CPU: the optimizer's moments and ``foreach`` temporaries (``OPTIMIZER_COPIES`` × the parameters) and the
  larger of two traced working sets (fake tensors, ``trace``): one micro-batch's forward, loss and backward
  (activations kept for the backward pass, the gradients), and one validation batch's forward and loss on
  whole frames; plus ``ALLOCATOR_SLACK`` as for inference. A training step allocates and frees many tensors
  small enough for glibc's heap (at most 32 MiB, its largest mmap threshold) between long-lived ones; the
  heap's holes cannot be returned, and a step's peak RssAnon exceeded its live tensors by a share of the
  traced heap-sized bytes that varied between configurations: ``HEAP_FRAGMENTATION`` of them is added. The
  heap the steps grew stays resident (glibc returns only its top) while a validation batch runs: validation is
  planned on top of the step's heap-sized bytes (both fitted on an AMD EPYC with torch 2.13 and glibc 2.36 over
  the memory table's training rows, two to six runs each, within 9 % of their mean; the table shows the error).
  (A fixed small mmap threshold would make the heap exact, at the price of fresh pages for every tensor.)
Device (CUDA) = the parameters, the optimizer's terms and the larger working set, the micro-batch's inputs
included (the CUDA allocator's ``max_memory_allocated`` counts the same tensors).
A distillation's teacher (``TrainConfig.teacher``) adds, on either, its parameters and its traced forward on a
micro-batch without gradients (its output is held through the student's step; its working set before it is
transient, so the sum is an upper bound).

The loss's working set grows with the number of target slots it compares with every pixel: planned as the
in-frame emitter count that a batch's busiest frame reaches over a long run (mean + ``SLOT_SIGMAS``·sqrt(mean)),
never more than the simulation's ``k_max``. A short run, whose busiest frame is less busy, stays below the plan.
bf16 training on a CPU without native bf16 is not planned for (``decode_mem.train`` warns against it; its
memory was never measured): its prediction is that of the traced bf16 tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from decode_mem.footprint.inference import ALLOCATOR_SLACK, MiB, executor_amp
from decode_mem.footprint.trace import fake_network, remembered_trace
from decode_mem.model.loss import DecodeLoss
from decode_mem.model.net import DecodeNet
from decode_mem.model.precision import autocast, resolve_amp
from decode_mem.simulate.config import SimulationConfig
from decode_mem.simulate.dataset import WINDOW

BATCHES_IN_FLIGHT = 3  # see the module docstring
OPTIMIZER_COPIES = 4  # AdamW: two moments kept, two parameter-sized temporaries while it steps
SLOT_SIGMAS = 4.0
HEAP_FRAGMENTATION = 0.3  # host bytes a training step adds per traced heap-sized byte (module docstring)


@dataclass(frozen=True)
class TrainingPlan:
    """What a training run will hold at its peak, in bytes (see the module docstring)."""

    frame_shape: tuple[int, int]
    crop_shape: tuple[int, int]  # the micro-batch's spatial size: the chunk, or the whole frame
    batch_size: int
    accumulation_steps: int
    val_size: int
    amp: str
    device: str
    slots: int  # of a training micro-batch (crop)
    val_slots: int  # of a validation batch (whole frames)
    parameter_bytes: int
    train_bytes: int  # traced: one micro-batch's forward + loss + backward (inputs excluded)
    train_heap_bytes: int  # ... of which in glibc's heap (``trace.LiveBytes.heap_peak``, the module docstring)
    validation_bytes: int  # traced: one validation batch's forward + loss (inputs excluded)
    input_bytes: int  # one micro-batch's inputs
    batch_bytes: int  # one simulated whole-frame batch
    val_set_bytes: int
    baseline_bytes: int
    teacher_bytes: int = 0  # a distillation's teacher: its parameters and its forward on a micro-batch

    @property
    def optimizer_bytes(self) -> int:
        return OPTIMIZER_COPIES * self.parameter_bytes

    @property
    def network_bytes(self) -> int:
        """The larger of the two traced working sets."""
        return max(self.train_bytes, self.validation_bytes)

    @property
    def network_host_bytes(self) -> int:
        """The network's work in host memory on a CPU: the training step with its heap's fragmentation, or the
        validation batch on top of the heap the steps grew, whichever is larger."""
        step = self.train_bytes + int(HEAP_FRAGMENTATION * self.train_heap_bytes)
        return max(step, self.validation_bytes + self.train_heap_bytes)

    @property
    def data_bytes(self) -> int:
        return BATCHES_IN_FLIGHT * self.batch_bytes + self.val_set_bytes

    @property
    def host_bytes(self) -> int:
        host = self.baseline_bytes + self.data_bytes
        if self.device == "cpu":
            host += self.optimizer_bytes + self.network_host_bytes + self.teacher_bytes + ALLOCATOR_SLACK
        return host

    @property
    def device_bytes(self) -> int:
        if self.device == "cpu":
            return 0
        return self.parameter_bytes + self.optimizer_bytes + self.network_bytes + self.input_bytes + self.teacher_bytes

    @property
    def need_bytes(self) -> int:
        """The number a budget is compared with: device memory on CUDA, host RssAnon on a CPU."""
        return self.device_bytes if self.device != "cpu" else self.host_bytes

    def as_dict(self) -> dict[str, Any]:
        mib = {"predicted_host_mib": self.host_bytes, "predicted_device_mib": self.device_bytes,
               "baseline_mib": self.baseline_bytes, "data_mib": self.data_bytes,
               "optimizer_mib": self.optimizer_bytes, "train_mib": self.train_bytes,
               "train_heap_mib": self.train_heap_bytes, "validation_mib": self.validation_bytes,
               "teacher_mib": self.teacher_bytes}
        return {"frame_shape": list(self.frame_shape), "crop_shape": list(self.crop_shape),
                "batch_size": self.batch_size, "accumulation_steps": self.accumulation_steps,
                "val_size": self.val_size, "amp": self.amp, "device": self.device, "slots": self.slots,
                "val_slots": self.val_slots, **{k: round(v / MiB, 1) for k, v in mib.items()}}


def planned_slots(simulation: SimulationConfig, shape: tuple[int, int] | None = None) -> int:
    """Target slots the loss compares with every pixel at a long run's busiest batch, for frames or crops of
    ``shape`` (default: the simulation's frames; ``train.chunking`` packs a crop's targets), see the module
    docstring."""
    h, w = shape if shape is not None else simulation.frame_size
    mean = simulation.max_density_px * h * w
    return max(1, min(simulation.k_max, math.ceil(mean + SLOT_SIGMAS * math.sqrt(mean) + 1.0)))


def plan_training(net: DecodeNet, simulation: SimulationConfig, *, batch_size: int, chunk_size: int | None = None,
                  accumulation_steps: int = 1, val_size: int = 64, amp: str | None = "off",
                  device: str | torch.device = "cpu", baseline_bytes: int = 0,
                  teacher: DecodeNet | None = None) -> TrainingPlan:
    """Predict the peak memory of ``decode_mem.train`` with these settings (nothing real is allocated).

    ``chunk_size``: the training crop side (already aligned), None for whole frames. ``baseline_bytes``: the
    process's RssAnon with the model and optimizer built, measured by the caller. ``teacher``: a distillation's
    teacher network (module docstring).
    """
    device = torch.device(device)
    amp_name = executor_amp(amp, device)
    h, w = simulation.frame_size
    crop = (h, w) if chunk_size is None else (min(h, int(chunk_size)), min(w, int(chunk_size)))
    slots, val_slots = planned_slots(simulation, crop), planned_slots(simulation)
    b = int(batch_size)
    loss_fn = DecodeLoss(model_config=net.config)
    train, train_heap = _traced(net, loss_fn, (b, *crop), slots, amp_name, device, training=True)
    validation, _ = _traced(net, loss_fn, (min(b, int(val_size)), h, w), val_slots, amp_name, device,
                            training=False)
    parameters = _parameter_bytes(net)
    teacher_bytes = 0
    if teacher is not None:
        teacher_bytes = _parameter_bytes(teacher) + _traced(teacher, None, (b, *crop), 0, amp_name, device,
                                                            training=False)[0]
    per_window = 4 * ((WINDOW + 2) * h * w + simulation.k_max * 4) + simulation.k_max  # frames, bg, read_var, em, mask
    crop_inputs = 4 * b * ((WINDOW + 2) * crop[0] * crop[1] + slots * 4) + b * slots
    return TrainingPlan((h, w), crop, b, int(accumulation_steps), int(val_size), amp_name, device.type, slots,
                        val_slots, int(parameters), train, train_heap, validation, int(crop_inputs), b * per_window,
                        int(val_size) * per_window, int(baseline_bytes), int(teacher_bytes))


def _parameter_bytes(net: DecodeNet) -> int:
    return int(sum(p.numel() * p.element_size() for p in net.parameters()))


def _traced(net: DecodeNet, loss_fn: DecodeLoss | None, shape: tuple[int, int, int], slots: int, amp: str,
            device: torch.device, *, training: bool) -> tuple[int, int]:
    """(peak bytes, peak bytes of heap-sized storages) above the inputs of a training micro-batch (forward,
    loss, backward) or of a validation batch (forward and loss, no gradients), traced on fake tensors
    (remembered). Without ``loss_fn``: the forward alone, no gradients (a distillation's teacher)."""
    n, h, w = shape
    if n == 0:
        return 0, 0

    def trace() -> int:
        with fake_network(net) as (fake, counter):
            fake.train(training)
            frames = torch.zeros((n, WINDOW, h, w), device=device)
            read_var = torch.zeros((n, h, w), device=device)
            bg = torch.zeros((n, h, w), device=device)
            level = torch.zeros((n, WINDOW), device=device)
            em = torch.zeros((n, slots, 4), device=device)
            mask = torch.ones((n, slots), dtype=torch.bool, device=device)
            inputs, heap_inputs = counter.live, counter.heap_live
            with torch.set_grad_enabled(training):
                with autocast(device, resolve_amp(amp, device)):
                    output = fake(frames, read_var=read_var, level=level)
                if loss_fn is not None:
                    terms = loss_fn(output, em, mask, bg, compact=False)
                    if training:
                        terms.total.backward()
            return [int(counter.peak - inputs), int(counter.heap_peak - heap_inputs)]

    # each remembered as [peak, heap peak]
    what = "training step" if training else "validation batch" if loss_fn is not None else "forward"
    peak, heap = remembered_trace(net, [what, [n, h, w], slots, amp, device.type], trace)
    return int(peak), int(heap)


__all__ = ["TrainingPlan", "plan_training", "planned_slots"]
