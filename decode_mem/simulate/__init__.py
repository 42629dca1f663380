"""SMLM simulation: emitters, PSFs, camera noise, training data and big synthetic stacks.

The names below are imported on first use (PEP 562), so ``from decode_mem.simulate import SimulationConfig``
does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily
    from decode_mem.simulate.config import AstigmatismCalibration, SimulationConfig
    from decode_mem.simulate.dataset import SimulatedDataset, simulate_batch, simulate_samples, simulate_windows
    from decode_mem.simulate.movie import MovieSimulator, simulate_movie
    from decode_mem.simulate.stack import StackResult, simulate_stack

_EXPORTS = {
    "AstigmatismCalibration": "config",
    "SimulationConfig": "config",
    "SimulatedDataset": "dataset",
    "simulate_batch": "dataset",
    "simulate_samples": "dataset",
    "simulate_windows": "dataset",
    "MovieSimulator": "movie",
    "simulate_movie": "movie",
    "StackResult": "stack",
    "simulate_stack": "stack",
}
__all__ = [
    "AstigmatismCalibration",
    "MovieSimulator",
    "SimulatedDataset",
    "SimulationConfig",
    "StackResult",
    "simulate_batch",
    "simulate_movie",
    "simulate_samples",
    "simulate_stack",
    "simulate_windows",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
