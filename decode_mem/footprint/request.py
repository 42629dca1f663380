"""What sizes are asked for (``SizeRequest``) and what they are for (``Workload``): the two typed objects the
planner takes. A run's size flags are resolved once into a ``SizeRequest`` (``InferConfig.sizes``), which travels
unchanged through the engine's settings and ``predict_stack`` to ``choose_sizes``; the ``InferencePlan`` chosen
there carries the executor's ``TileConfig`` (``footprint.inference.tile_config`` is the one place sizes become one).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from decode_mem.errors import ConfigError

if TYPE_CHECKING:
    import torch

Size = int | Literal["auto"]
# ``model.engine.ENGINE_CHOICES`` and ``RUNTIME_MODULES``, torch-free here (a test holds them equal)
ENGINE_CHOICES = ("auto", "torch", "openvino", "onnxruntime", "openvino-int8")
RUNTIME_MODULES = {"openvino": ("openvino",), "onnxruntime": ("onnxruntime", "onnx"),
                   "openvino-int8": ("openvino", "nncf")}  # what each runtime imports


def missing_runtime(engine: str) -> str | None:
    """The modules a runtime ``engine`` needs that are not installed, as words ('openvino'); None where nothing is
    missing or ``engine`` is no runtime ('torch', 'auto')."""
    import importlib.util

    gone = [m for m in RUNTIME_MODULES.get(engine, ()) if importlib.util.find_spec(m) is None]
    return " and ".join(gone) or None


@dataclass(frozen=True)
class SizeRequest:
    """The sizes an inference run asks for; ``'auto'``: the fastest that fit ``memory_limit``.

    chunk_size      tile core side in px, 'auto', or 'whole' (one tile per frame)
    batch_size      windows (tile x frame) per network call, or 'auto'
    block           frames per block, or 'auto' (``tiling.block_length``)
    amp             'auto' | 'bf16' | 'fp16' | 'off' (None: off)
    memory_limit    bytes (``config.parse_bytes`` reads '2GiB'): host RssAnon on a CPU, device memory on CUDA; None:
                    ``footprint.choose``'s modest default
    streams         blocks computed at once on a CPU (always one on CUDA)
    probe           time 'auto' candidates on the device (False: the largest tiles that fit, not timed)
    engine          what computes the network: 'torch', 'openvino', 'onnxruntime' (CPU runtimes, the ``cpu``
                    extra), 'openvino-int8' (OpenVINO in int8, ``model.int8``; not equal to fp32) or 'auto' (the
                    fastest of torch, the first two and, where its check against fp32 passed, int8, measured here;
                    ``footprint.engines``)
    """

    chunk_size: Size | Literal["whole"] = "auto"
    batch_size: Size = "auto"
    block: Size = "auto"
    amp: str | None = "auto"
    memory_limit: int | None = None
    streams: int = 1
    probe: bool = True
    engine: str = "torch"

    def __post_init__(self) -> None:
        for name, words in (("chunk_size", ("auto", "whole")), ("batch_size", ("auto",)), ("block", ("auto",))):
            value = getattr(self, name)
            if value not in words and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
                raise ConfigError(f"{name} must be a positive integer or 'auto', got {value!r}")
        if self.engine not in ENGINE_CHOICES:
            raise ConfigError(f"engine must be one of {', '.join(ENGINE_CHOICES)}, got {self.engine!r}")

    @property
    def automatic(self) -> bool:
        """Sizes the planner chooses (and keeps within the headroom), rather than sizes the user gave."""
        return self.chunk_size == "auto" or self.batch_size == "auto"


@dataclass(frozen=True)
class Workload:
    """What sizes are chosen for: frames of ``frame_shape`` (H, W) px, ``n_frames`` of them (None: any number),
    ``itemsize`` bytes a pixel, computed on ``device``, with ``margin`` px of exact output kept around each tile
    core (``postprocess.MARGIN`` for localization, 0 for raw output maps)."""

    frame_shape: tuple[int, int]
    device: torch.device
    margin: int
    itemsize: int = 2
    n_frames: int | None = None

