"""The DECODE-style network and its loss.

* ``ModelConfig`` and the output channels (``config``); ``DecodeNet`` (``net``): frames in photons
  (N, 3, H, W) -> output (N, 10, H, W) in physical units, tile-exact, with its parts (``normalize``, ``pad``,
  ``frame_features``, ``temporal``) exposed for the tiled executor; ``measure_receptive_field``: the halo the
  executor needs, by the impulse response of a probe network (``receptive_field``: the technique).
* ``decode_loss`` / ``DecodeLoss`` / ``LossConfig`` / ``LossTerms`` (``loss``): count + GMM localization +
  background loss.
* ``UNet2d`` (``unet``): the tile-exact U-Net building block; ``precision``: autocast dtypes, ``amp='auto'``;
  ``checkpoint``: self-describing checkpoints with the training envelope, ``load_model``; ``choice``: which
  shipped model runs where none is given (the wide one on a GPU, the small one on a CPU).

Imports ``decode_mem.io`` (camera) and ``decode_mem.simulate`` (the envelope of a training config) from below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.model.config import (
        CHANNEL_INDEX,
        CONTEXT_FRAMES,
        N_OUTPUT_CHANNELS,
        OUTPUT_CHANNELS,
        ModelConfig,
    )
    from decode_mem.model.loss import DecodeLoss, LossConfig, LossTerms, decode_loss
    from decode_mem.model.net import DecodeNet, measure_receptive_field
    from decode_mem.model.unet import UNet2d

# imported on first use: the torch-free modules (``config``, ``arrays``, ``choice``) without torch (``torch_facts``)
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(("CHANNEL_INDEX", "CONTEXT_FRAMES", "N_OUTPUT_CHANNELS", "OUTPUT_CHANNELS", "ModelConfig"),
                    "config"),
    **dict.fromkeys(("DecodeLoss", "LossConfig", "LossTerms", "decode_loss"), "loss"),
    **dict.fromkeys(("DecodeNet", "measure_receptive_field"), "net"),
    "UNet2d": "unet",
})

__all__ = [
    "CHANNEL_INDEX",
    "CONTEXT_FRAMES",
    "N_OUTPUT_CHANNELS",
    "OUTPUT_CHANNELS",
    "DecodeLoss",
    "DecodeNet",
    "LossConfig",
    "LossTerms",
    "ModelConfig",
    "UNet2d",
    "decode_loss",
    "measure_receptive_field",
]
