"""The planner's remembered measurements (``io.remembered``: one folder of small JSON tables) and the machine as
their keys name it."""

from __future__ import annotations

import platform
from typing import Any

from decode_mem.io.remembered import cache_path, read_table, remember, rewrite
from decode_mem.torch_facts import torch_threads

__all__ = ["cache_path", "device_name", "read_table", "remember", "rewrite"]


def device_name(device: Any) -> str:
    """The machine as the tables key it: the GPU's name, or the CPU model and torch's threads (``torch_facts``: a
    run that does not load torch keys its tables as one that does)."""
    if device.type == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        model = ""
    return f"{model or platform.processor() or platform.machine()} x{torch_threads()} threads"
