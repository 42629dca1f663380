"""``python -m decode_mem.plan``: the memory of an ``infer`` or ``train`` run, predicted before it runs (its CLI
sits above both, so that it plans as they would). The planner itself is ``decode_mem.footprint``; its names are
also here, for scripts that import them from ``decode_mem.plan``."""

from __future__ import annotations

from decode_mem._lazy import lazy_exports

_NAMES = ("InferencePlan", "LiveBytes", "SizeChoice", "TrainingPlan", "choose_sizes", "choose_sizes_here",
          "memory_budget", "parse_bytes", "peak_bytes", "plan_inference", "plan_training", "warm_up")
__all__ = list(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(_NAMES, "decode_mem.footprint"))
