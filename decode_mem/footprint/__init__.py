"""Predicted memory (the footprint) of tiled inference and of training, from the network's shape, the tile plan or
the batch and crop, before anything runs, and ``'auto'`` sizes — the fastest that fit a budget. ``infer`` uses
it to choose sizes, ``train`` and ``fit`` to choose crops and batches; all three refuse settings that cannot fit;
``python -m decode_mem.plan`` prints it. Names load lazily.

    plan = plan_inference(net, (2048, 2048), chunk_size=512, batch_size=4, amp="bf16", device="cpu")
    choice = choose_sizes(net, (2048, 2048), memory_limit=parse_bytes("2GiB"))
    training = plan_training(net, SimulationConfig(frame_size=(128, 128)), batch_size=8, chunk_size=64)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.footprint.choose import SizeChoice, choose_sizes, choose_sizes_here, memory_budget, parse_bytes
    from decode_mem.footprint.inference import InferencePlan, plan_inference, warm_up
    from decode_mem.footprint.trace import LiveBytes, peak_bytes
    from decode_mem.footprint.training import TrainingPlan, plan_training

__all__ = ["InferencePlan", "LiveBytes", "SizeChoice", "TrainingPlan", "choose_sizes", "choose_sizes_here",
           "memory_budget", "parse_bytes", "peak_bytes", "plan_inference", "plan_training", "warm_up"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "SizeChoice": "choose", "choose_sizes": "choose", "choose_sizes_here": "choose", "memory_budget": "choose",
    "parse_bytes": "choose", "InferencePlan": "inference", "plan_inference": "inference", "warm_up": "inference",
    "LiveBytes": "trace", "peak_bytes": "trace", "TrainingPlan": "training", "plan_training": "training"})
