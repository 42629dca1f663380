"""What the network is: its hyper-parameters (``ModelConfig``) and the meaning of its output channels."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from decode_mem.config import Z_REFERENCES, check_choice, check_keys, check_number
from decode_mem.errors import ConfigError

ACTIVATION_NAMES = ("elu", "relu", "leaky_relu", "silu", "gelu")
"""The activations ``unet.ACTIVATIONS`` makes, by name (here without torch: a config is read without it)."""
UPSAMPLE_MODES = ("nearest", "transpose")

OUTPUT_CHANNELS: tuple[str, ...] = (
    "p_logit",
    "photons",
    "dx",
    "dy",
    "z",
    "sigma_photons",
    "sigma_x",
    "sigma_y",
    "sigma_z",
    "bg",
)
"""Channel order of the network output (physical units, see the module docstring)."""

CHANNEL_INDEX: dict[str, int] = {name: i for i, name in enumerate(OUTPUT_CHANNELS)}
N_OUTPUT_CHANNELS = len(OUTPUT_CHANNELS)
CONTEXT_FRAMES = 3
"""Frames per input window: (t-1, t, t+1)."""

HEAD_CHANNELS = (("p", 1), ("mean", 4), ("sigma", 4), ("bg", 1))  # the heads' outputs, concatenated in this order
INPUT_TRANSFORMS = ("anscombe", "linear")
BG_PARAMS = ("sqrt", "linear")
LEVEL_SAMPLES = 4096  # frame_level reads about this many pixels of a frame (a fixed sub-grid)
LEVEL_UNIT = 20.0  # the level channel: level / LEVEL_UNIT (levels run from ~3 to ~200)


def level_stride(height: int, width: int) -> int:
    """Stride of the sub-grid a frame's level is read on: about ``LEVEL_SAMPLES`` pixels of an H x W frame."""
    return max(1, math.isqrt(height * width // LEVEL_SAMPLES))


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of ``DecodeNet``; frozen, serializable with ``to_dict`` / ``from_dict``.

    depth, features       U-Net levels (max-pool factor 2 each) and channels of the first level (doubles per
                          level); both U-Nets use the same values (DECODE: 2 and 48).
    inter_features        channels of the per-frame features, of the temporal U-Net output and of the heads.
    unshuffle             r: each U-Net works on r x r blocks of pixels folded into channels (``pixel_unshuffle``),
                          its output unfolded again (``pixel_shuffle``): 1/r the side, r² times ``inter_features``
                          and input channels, so a CPU's vector units (16 floats wide) are full where a few
                          features at full size left them mostly empty. 1 (default): no folding.
    activation            one of ``ACTIVATION_NAMES`` ("elu", "relu", "leaky_relu", ...).
    upsample              "nearest" (nearest x2 + 1x1 conv) or "transpose" (2x2 stride-2 transposed conv).
    input_transform       "anscombe" (variance-stabilized, level-subtracted frames + a read-noise channel) or
                          "linear" (``(x - offset) / scale``, one channel); see the module docstring.
    input_offset/scale    subtracted from / dividing the transformed frame.
    photon_scale          photons of a saturated ``photons`` output; also the photon unit of the loss.
    z_scale               nm; ``z`` lies in (-z_scale, z_scale); also the z unit of the loss.
    bg_scale              photons / px of a saturated ``bg`` output; also the background unit of the loss.
    bg_param              "sqrt" (``bg = sigmoid² · bg_scale``) or "linear" (``sigmoid · bg_scale``).
    sigma_max, sigma_eps  sigmas are ``sigmoid * sigma_max + sigma_eps`` in scaled units (px for x, y).
    sigma_photons_eps     floor of the photon sigma in photons: ``sigmoid * sigma_max * photon_scale +
                          sigma_photons_eps``. A floor in scaled units (``sigma_eps * photon_scale``, 300
                          photons at 30 000) is above the whole error of a dim spot; checkpoints made before
                          this field keep that legacy floor (``LEGACY_SIGMA_PHOTONS_EPS``), which their
                          weights were trained against.
    p_bias_init           initial bias of the p-logit output (-6: p ~ 0.0025 everywhere at start).
    grad_checkpointing    recompute each U-Net's activations in backward (training with grad only).
    use_z                 False for 2-D data: the z output is 0 and the loss ignores z.
    field_shape           (H, W) px of the field a PSF that changes across it was calibrated over (a 3-D model of
                          such a PSF), else None: two more input channels carry each pixel's place in that
                          field (``DecodeNet.field_coordinates``), so the network knows which PSF it looks at.
    z_reference           what the ``z`` output is measured from: "absolute", or "focal_plane" (a model of a PSF
                          that changes across the field, trained with ``SimulationConfig.z_reference`` the same:
                          z from the focal plane at the spot's place; ``infer.predict`` adds the PSF's focal
                          shift there, so localizations are absolute).
    """

    depth: int = 2
    features: int = 48
    inter_features: int = 48
    unshuffle: int = 1
    activation: str = "elu"
    upsample: str = "nearest"
    input_transform: str = "anscombe"
    input_offset: float = 0.0
    input_scale: float = 3.0
    photon_scale: float = 10000.0
    z_scale: float = 1000.0
    bg_scale: float = 4000.0
    bg_param: str = "sqrt"
    sigma_max: float = 3.0
    sigma_eps: float = 0.01
    sigma_photons_eps: float = 10.0  # below the shot noise of the dimmest spot detected (~100 photons)
    p_bias_init: float = -6.0
    grad_checkpointing: bool = False
    use_z: bool = True
    field_shape: tuple[int, int] | None = None
    z_reference: str = "absolute"

    def __post_init__(self) -> None:
        for name in ("depth", "features", "inter_features", "unshuffle"):
            check_number(f"model.{name}", getattr(self, name), integer=True)
        if self.unshuffle not in (1, 2, 4):
            raise ConfigError(f"model.unshuffle must be 1, 2 or 4, got {self.unshuffle!r}")
        if not 0 <= self.depth <= 8:
            raise ConfigError(f"model.depth must be in [0, 8], got {self.depth!r}")
        for name in ("features", "inter_features"):
            if getattr(self, name) < 1:
                raise ConfigError(f"model.{name} must be >= 1, got {getattr(self, name)!r}")
        for name, choices in (("activation", sorted(ACTIVATION_NAMES)), ("upsample", UPSAMPLE_MODES),
                              ("input_transform", INPUT_TRANSFORMS), ("bg_param", BG_PARAMS)):
            check_choice(f"model.{name}", getattr(self, name), choices)
        for name in ("input_scale", "photon_scale", "z_scale", "bg_scale", "sigma_max", "sigma_eps",
                     "sigma_photons_eps"):
            check_number(f"model.{name}", getattr(self, name), positive=True)
        for name in ("input_offset", "p_bias_init"):
            check_number(f"model.{name}", getattr(self, name))
        if not isinstance(self.use_z, bool):
            raise ConfigError(f"model.use_z must be true or false, got {self.use_z!r}")
        if not isinstance(self.grad_checkpointing, bool):
            raise ConfigError(f"model.grad_checkpointing must be true or false, got {self.grad_checkpointing!r}")
        if self.field_shape is not None:
            shape = self.field_shape
            if (not isinstance(shape, (list, tuple)) or len(shape) != 2
                    or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 2 for v in shape)):
                raise ConfigError(f"model.field_shape must be (H, W), two integers >= 2, or null; got {shape!r}")
            if self.input_transform != "anscombe":
                raise ConfigError("model.field_shape needs input_transform 'anscombe'")
            object.__setattr__(self, "field_shape", (int(shape[0]), int(shape[1])))
        check_choice("model.z_reference", self.z_reference, Z_REFERENCES)
        if self.z_reference == "focal_plane" and (self.field_shape is None or not self.use_z):
            raise ConfigError("model.z_reference 'focal_plane' is for a 3-D model of a PSF that changes across the "
                              "field (use_z and field_shape)")

    @staticmethod
    def legacy_sigma_photons_eps(params: dict[str, Any]) -> float:
        """The photon-sigma floor of a config saved before ``sigma_photons_eps``: ``sigma_eps * photon_scale``."""
        defaults = ModelConfig()
        return float(params.get("sigma_eps", defaults.sigma_eps)) * float(
            params.get("photon_scale", defaults.photon_scale))

    @property
    def downsample_factor(self) -> int:
        """Side multiple a tile's origin and size must be: ``unshuffle * 2**depth``."""
        return self.unshuffle * 2**self.depth

    @property
    def feature_channels(self) -> int:
        """Channels of a frame's features as ``DecodeNet.frame_features`` gives them: ``inter_features`` per pixel
        of each folded ``unshuffle`` x ``unshuffle`` block."""
        return self.inter_features * self.unshuffle**2

    @property
    def input_channels(self) -> int:
        """Channels per frame after ``normalize``: 3 (frame, read noise, level) for 'anscombe', 1 for 'linear';
        2 more (the place in the field) with ``field_shape``."""
        return (3 + (2 if self.field_shape is not None else 0)) if self.input_transform == "anscombe" else 1

    def output_scales(self) -> tuple[float, ...]:
        """Per-channel unit of the output (``OUTPUT_CHANNELS`` order): dividing by it gives O(1) values.

        Use it to compare outputs with an absolute tolerance, e.g. tiled vs whole-frame.
        """
        p, z = float(self.photon_scale), float(self.z_scale)
        return (1.0, p, 1.0, 1.0, z, p, 1.0, 1.0, z, float(self.bg_scale))

    @classmethod
    def tiny(cls, **overrides: Any) -> ModelConfig:
        """Test / smoke-test preset: depth 2, 8 features (~59 k parameters)."""
        return cls(**{"depth": 2, "features": 8, "inter_features": 8, **overrides})

    @classmethod
    def small(cls, **overrides: Any) -> ModelConfig:
        """CPU preset: depth 2, 16 features (~0.23 M parameters)."""
        return cls(**{"depth": 2, "features": 16, "inter_features": 16, **overrides})

    @classmethod
    def from_dict(cls, params: dict[str, Any]) -> ModelConfig:
        """Build from a mapping (YAML / checkpoint); unknown keys are an error naming the key."""
        check_keys(cls, params, "model")
        return cls(**params)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.field_shape is None:  # checkpoints of models without it stay as they were
            del out["field_shape"]
        else:
            out["field_shape"] = list(self.field_shape)
        if self.unshuffle == 1:  # nor those without folding
            del out["unshuffle"]
        return out
