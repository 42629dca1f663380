"""SMLM simulation: emitters, PSFs, camera noise, training data and big synthetic stacks.

The names below are imported on first use (PEP 562), so ``from decode_mem.simulate import SimulationConfig``
does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily
    from decode_mem.simulate.config import AstigmatismCalibration, SimulationConfig
    from decode_mem.simulate.dataset import SimulatedDataset, simulate_batch, simulate_samples, simulate_windows
    from decode_mem.simulate.movie import MovieSimulator, simulate_movie
    from decode_mem.simulate.stack import StackResult, simulate_stack

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
__getattr__, __dir__ = lazy_exports(__name__, {
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
})
