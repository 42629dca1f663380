"""The DECODE-style network and its loss.

* ``DecodeNet`` / ``ModelConfig`` (``net``): frames in photons (N, 3, H, W) -> output (N, 10, H, W) in physical
  units, channels ``OUTPUT_CHANNELS``; tile-exact, with its parts (``normalize``, ``pad``, ``frame_features``,
  ``temporal``) and ``receptive_field()`` exposed for the tiled executor.
* ``decode_loss`` / ``DecodeLoss`` / ``LossConfig`` / ``LossTerms`` (``loss``): count + GMM localization +
  background loss.
* ``UNet2d`` (``unet``): the tile-exact U-Net building block.

Imports only ``decode_mem.errors`` (and torch) from below.
"""

from decode_mem.model.loss import DecodeLoss, LossConfig, LossTerms, decode_loss
from decode_mem.model.net import (
    CHANNEL_INDEX,
    CONTEXT_FRAMES,
    N_OUTPUT_CHANNELS,
    OUTPUT_CHANNELS,
    DecodeNet,
    ModelConfig,
    measure_receptive_field,
)
from decode_mem.model.unet import UNet2d

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
