"""Training (``python -m decode_mem.train``): config, simulated data streams, one AMP step with accumulation
and chunking, validation, the loop ``fit``. Names load lazily.

    model_path = fit(load_train_config("pipelines/train_generalist_2d.yaml"))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.train.config import TrainConfig, load_train_config
    from decode_mem.train.loop import fit

__all__ = ["TrainConfig", "fit", "load_train_config"]
__getattr__, __dir__ = lazy_exports(__name__, {"TrainConfig": "config", "load_train_config": "config",
                                               "fit": "loop"})
