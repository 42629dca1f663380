"""``TileConfig``: how the executor cuts and batches the work, checked once when it is made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from decode_mem.config import AMP_CHOICES
from decode_mem.errors import ConfigError


@dataclass(frozen=True)
class TileConfig:
    """How the executor cuts and batches the work.

    chunk_size      tile core side in px (rounded down to a multiple of the down-sampling factor)
    batch_size      (tile, frame) items per network call
    block           frames read per block, or 'auto' (about ``BLOCK_BYTES`` of raw input, 4..256 frames)
    amp             None or 'off' (fp32), 'bf16', 'fp16' or 'auto' autocast (``decode_mem.model.precision``)
    margin          px of exact output kept around each core for post-processing (``postprocess.MARGIN``)
    reuse_features  compute the frame U-Net once per frame (False: three times, as DECODE; for comparison)
    channels_last   feed the network channels-last tensors (with its weights channels-last too — the caller's
                    ``net.to(memory_format=torch.channels_last)`` — oneDNN / cuDNN pick faster kernels; the same
                    math in another summation order)
    compile         run the frame U-Net and the temporal part through ``torch.compile`` (fused, vectorized
                    element-wise work; tens of seconds to compile per input shape, so for long stacks only);
                    a string is torch.compile's ``mode`` (``'reduce-overhead'``: CUDA graphs). On CUDA not
                    measured yet: off unless asked (``benchmarks/bench_gpu.py`` measures it)
    compiled_dir    with ``compile`` True on a CPU: a folder where the compiled graphs are kept, so that a later
                    process (a ``--resume``) loads them rather than tracing the network again
                    (``tiling.precompiled``); None: traced in every process
    cudnn_benchmark on CUDA, let cuDNN time its algorithms for each input shape at the shape's first call and keep
                    the fastest (``torch.backends.cudnn.benchmark``, set only around this executor's network
                    calls); the planner's timed units make that first call before timing
    streams         blocks computed at once on a CPU, each with 1/streams of torch's threads (module docstring);
                    each holds its own block and network working set
    max_retries     out-of-memory back-offs allowed for one block before giving up
    """

    chunk_size: int = 512
    batch_size: int = 1
    block: int | Literal["auto"] = "auto"
    amp: Literal["auto", "bf16", "fp16", "off"] | None = None
    margin: int = 0
    reuse_features: bool = True
    channels_last: bool = True
    compile: bool | str = False
    compiled_dir: str | None = None
    cudnn_benchmark: bool = True
    streams: int = 1
    max_retries: int = 8

    def __post_init__(self) -> None:
        for name in ("chunk_size", "batch_size", "block", "streams"):
            value = getattr(self, name)
            if (value != "auto" or name != "block") and (
                    isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
                what = "a positive integer or 'auto'" if name == "block" else "a positive integer"
                raise ConfigError(f"{name} must be {what} (choose 'auto' sizes with decode_mem.plan), got {value!r}")
        if self.amp not in (None, *AMP_CHOICES):
            raise ConfigError(f"amp must be None or one of {AMP_CHOICES}, got {self.amp!r}")
        if isinstance(self.margin, bool) or not isinstance(self.margin, int) or self.margin < 0:
            raise ConfigError(f"margin must be an integer >= 0, got {self.margin!r}")
        if not isinstance(self.compile, (bool, str)):
            raise ConfigError(f"compile must be True, False or a torch.compile mode, got {self.compile!r}")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries!r}")
