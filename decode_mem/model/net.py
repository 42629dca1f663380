"""The DECODE-style network: a shared per-frame U-Net, a temporal U-Net and four output heads.

Architecture (re-implemented from the published description, Speiser et al. 2021):

* **frame U-Net** (``frame_unet``): ``UNet2d(1 -> inter_features)``, applied with the same weights to each of
  the three context frames t-1, t, t+1;
* **temporal U-Net** (``temporal_unet``): ``UNet2d(3 * inter_features -> inter_features)`` on the three
  frames' features concatenated in the order (t-1, t, t+1);
* **heads**: p (1 channel), means (photons, dx, dy, z), sigmas (4) and background (1); each head is
  ``conv3x3 -> activation -> conv1x1``, the last conv in float32 also under autocast (so bf16 does not
  quantize photon counts).

The output is a float32 tensor ``(N, 10, H, W)`` in **physical units**, channels in the order
``OUTPUT_CHANNELS``:

====================  =====================================================================
``p_logit``           detection logit; ``p = sigmoid(p_logit)`` is the probability that an emitter
                      sits in this pixel
``photons``           ``sigmoid * photon_scale`` (photons)
``dx``, ``dy``        ``tanh`` offsets in px of the emitter from the pixel centre, in (-1, 1); the
                      emitter is at ``x = col + dx``, ``y = row + dy`` (pixel centres at integer
                      coordinates, x = column axis, y = row axis)
``z``                 ``tanh * z_scale`` (nm)
``sigma_photons``     ``sigmoid * sigma_max * photon_scale + sigma_photons_eps`` (photons)
``sigma_x/sigma_y``   ``(sigmoid * sigma_max + sigma_eps)`` (px)
``sigma_z``           ``(sigmoid * sigma_max + sigma_eps) * z_scale`` (nm)
``bg``                ``sigmoid * bg_scale`` (``bg_param='linear'``) or ``sigmoid² * bg_scale``
                      (``'sqrt'``: resolves backgrounds from a few to thousands of photons) (photons / px)
====================  =====================================================================

Input (``normalize``). ``input_transform='anscombe'`` (the default): each frame in photons becomes
``v = 2·sqrt(max(x, 0) + 3/8)`` — Poisson noise has unit variance in ``v`` whatever the background (√2 for
an EMCCD's excess noise) — minus the frame's *level* (the median of ``v`` over a fixed sub-grid of the whole
frame, ``frame_level``), minus ``input_offset``, over ``input_scale``; so a frame's background reads as ~0
and the zero padding at the frame's edges looks like more background, whatever the camera and the
background level. A second input channel carries the read-noise variance per pixel (``log1p`` of it in
photons²: a constant for an EMCCD or an sCMOS without maps, the calibration map for an sCMOS with maps), so
the network can discount noisy pixels; a third the frame's level itself (``level / LEVEL_UNIT``, constant over
the frame), without which photons and background could not be told apart. A model of a PSF that changes across
the field (``config.field_shape``) gets two more: each pixel's place in that field (``field_coordinates``: −1 to
1 from the first to the last pixel of the whole frame), computed from the global coordinates of the pixels it is
given (``origin``), so a tile sees the same values as the whole frame. ``input_transform='linear'`` is the original
``(x − input_offset)/input_scale`` of one channel (models trained before the transform existed).

The network is tile-exact (DESIGN.md §5): no normalization layers, zero 'same' padding, max-pool
down-sampling by ``2**depth`` in total, nearest / transposed-conv up-sampling, and the input is normalized
pointwise by constants per frame (the level is computed once from the whole frame, never per tile).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from decode_mem.model.config import (
    CHANNEL_INDEX,
    CONTEXT_FRAMES,
    HEAD_CHANNELS,
    LEVEL_UNIT,
    N_OUTPUT_CHANNELS,
    OUTPUT_CHANNELS,
    ModelConfig,
    level_stride,
)
from decode_mem.model.receptive_field import impulse_radius, probe_of
from decode_mem.model.unet import UNet2d, make_activation

__all__ = ["CHANNEL_INDEX", "CONTEXT_FRAMES", "N_OUTPUT_CHANNELS", "OUTPUT_CHANNELS", "DecodeNet", "ModelConfig",
           "measure_receptive_field"]

class _Head(nn.Sequential):
    def __init__(self, channels: int, out_channels: int, activation: str) -> None:
        super().__init__(
            nn.Conv2d(channels, channels, 3, padding=1),
            make_activation(activation),
            nn.Conv2d(channels, out_channels, 1),
        )


class DecodeNet(nn.Module):
    """DECODE-style network; see the module docstring for the output channels.

    ``forward(x)`` = ``normalize`` -> ``pad`` -> ``frame_features`` (each frame) -> ``temporal`` -> crop.
    A tiled executor can call the parts itself and compute each frame's features once, then reuse them in the
    three windows the frame belongs to.
    """

    def __init__(self, config: ModelConfig | None = None) -> None:
        super().__init__()
        cfg = config if config is not None else ModelConfig()
        self.config = cfg
        self._known_receptive_field: int | None = None  # ``assume_receptive_field``
        unet_kw = dict(features=cfg.features, depth=cfg.depth, activation=cfg.activation, upsample=cfg.upsample)
        fold = cfg.unshuffle**2  # channels per pixel block (``unshuffle``)
        self.frame_unet = UNet2d(cfg.input_channels * fold, cfg.inter_features * fold, **unet_kw)
        self.temporal_unet = UNet2d(CONTEXT_FRAMES * cfg.inter_features * fold, cfg.inter_features * fold, **unet_kw)
        self.heads = nn.ModuleDict(
            {name: _Head(cfg.inter_features * fold, k * fold, cfg.activation) for name, k in HEAD_CHANNELS}
        )
        sigma_unit = torch.tensor([cfg.photon_scale, 1.0, 1.0, cfg.z_scale], dtype=torch.float32)
        self.register_buffer("_sigma_unit", sigma_unit.view(1, 4, 1, 1), persistent=False)
        sigma_floor = torch.tensor([cfg.sigma_photons_eps, cfg.sigma_eps, cfg.sigma_eps, cfg.sigma_eps * cfg.z_scale],
                                   dtype=torch.float32)
        self.register_buffer("_sigma_floor", sigma_floor.view(1, 4, 1, 1), persistent=False)
        self.reset_parameters()

    # ------------------------------------------------------------------ set-up
    def reset_parameters(self) -> None:
        """Kaiming-normal conv weights, zero biases; small head outputs, p-logit bias ``p_bias_init`` and a
        background that starts low (``bg_param='sqrt'``).

        The last (1x1) conv of each head starts with a 10x smaller, linear-gain Kaiming std, so that a fresh
        network predicts mid-range values (photons ~ photon_scale / 2, dx ~ 0, sigma ~ 1.5 scaled units)
        instead of saturated sigmoids / tanh; the p-logit bias makes p ~ sigmoid(p_bias_init) everywhere.
        """
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                nn.init.zeros_(m.bias)
        for head in self.heads.values():
            last = head[-1]
            nn.init.normal_(last.weight, std=0.1 / math.sqrt(last.weight[0].numel()))
        nn.init.constant_(self.heads["p"][-1].bias, self.config.p_bias_init)
        if self.config.bg_param == "sqrt":  # start at bg_scale / 40 (100 photons for 4000), not mid-range
            nn.init.constant_(self.heads["bg"][-1].bias, math.log(1 / (math.sqrt(40) - 1)))

    @property
    def downsample_factor(self) -> int:
        """Total down-sampling factor ``unshuffle * 2**depth``: tile origins and sizes must be multiples of it."""
        return self.config.downsample_factor

    def receptive_field(self) -> int:
        """Receptive-field radius in px of the whole network (frame U-Net + temporal U-Net + heads).

        An output pixel at (r, c) depends only on input pixels (any of the 3 frames) within
        ``max(|dr|, |dc|) <= receptive_field()``, whatever the pixel's position modulo the down-sampling
        factor. Measured by an impulse response (see ``measure_receptive_field``); cached per architecture, or
        the radius given to ``assume_receptive_field``.
        """
        if self._known_receptive_field is not None:
            return self._known_receptive_field
        return measure_receptive_field(self.config, "total")

    def assume_receptive_field(self, radius: int) -> None:
        """Take ``radius`` as ``receptive_field()`` instead of measuring it: a radius this architecture's code
        measured before (``footprint.trace.remember_receptive_field`` keeps it with the code's fingerprint), so a
        process skips the probe (a fraction of a second of a short run's fixed cost)."""
        radius = int(radius)
        if radius <= 0:
            raise ValueError(f"a receptive field is a positive radius in px, got {radius}")
        self._known_receptive_field = radius

    def frame_unet_receptive_field(self) -> int:
        """Receptive-field radius in px of ``frame_features`` alone."""
        return measure_receptive_field(self.config, "frame")

    def temporal_receptive_field(self) -> int:
        """Receptive-field radius in px of ``temporal`` (temporal U-Net + heads) w.r.t. the features."""
        return measure_receptive_field(self.config, "temporal")

    # ------------------------------------------------------------------ parts
    def level_stride(self, height: int, width: int) -> int:
        """Stride of the sub-grid ``frame_level`` reads: about ``LEVEL_SAMPLES`` pixels of an H x W frame."""
        return level_stride(height, width)

    def level_from_sample(self, photons: torch.Tensor) -> torch.Tensor:
        """Level of frames from their sub-grid ``(..., h, w)`` in photons -> ``(...)``: median of the transform."""
        if self.config.input_transform == "linear":
            return photons.new_zeros(photons.shape[:-2], dtype=torch.float32)
        v = _anscombe(photons.float())
        return v.flatten(-2).median(dim=-1).values

    def frame_level(self, photons: torch.Tensor) -> torch.Tensor:
        """Per-frame level ``(...)`` of whole frames ``(..., H, W)`` in photons (see ``normalize``)."""
        s = self.level_stride(*photons.shape[-2:])
        return self.level_from_sample(photons[..., ::s, ::s])

    def normalize(self, x: torch.Tensor, level: torch.Tensor | None = None,
                  read_var: torch.Tensor | float | None = None, origin: torch.Tensor | None = None) -> torch.Tensor:
        """Frames in photons ``(..., H, W)`` -> network input ``(..., C, H, W)``, C = ``config.input_channels``.

        ``level`` ``(...)``: each frame's level (default: ``frame_level(x)``, which needs whole frames);
        ``read_var``: read-noise variance in photons², a number or a map broadcasting to ``(..., H, W)``
        (default 0); ``origin``: (row, col) px in the whole frame of the pixels' (0, 0), broadcasting to
        ``(..., 2)`` (default 0, 0: whole frames; used by models with ``field_shape`` only). Pointwise given
        these, so a tile normalizes exactly like the whole frame.
        """
        if not x.is_floating_point():
            x = x.float()
        cfg = self.config
        if cfg.input_transform == "linear":
            return ((x - cfg.input_offset) / cfg.input_scale).unsqueeze(-3)
        if level is None:
            level = self.frame_level(x)
        level = level[..., None, None]
        frame = (_anscombe(x) - level - cfg.input_offset) / cfg.input_scale
        noise = torch.log1p(torch.as_tensor(0.0 if read_var is None else read_var, dtype=frame.dtype,
                                            device=frame.device).clamp_min(0)) / 3.0
        channels = [frame, noise.expand_as(frame), (level / LEVEL_UNIT).expand_as(frame)]
        if cfg.field_shape is not None:
            start = torch.zeros(2, device=frame.device) if origin is None else origin
            coords = self.field_coordinates(start, frame.shape[-2:])
            channels += [c.expand_as(frame) for c in coords.unbind(-3)]
        return torch.stack(channels, dim=-3)

    def field_coordinates(self, origin: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
        """The place in the field of an ``shape = (h, w)`` region whose pixel (0, 0) is at ``origin`` (row, col)
        px of the whole frame (``(..., 2)``, any leading shape): ``(..., 2, h, w)`` float32, channel 0 x (column)
        and 1 y (row), each ``2·p/(n − 1) − 1`` for pixel p of a field of n px (``config.field_shape``): −1 at the
        first pixel centre, 1 at the last. A function of the global pixel only, so tiles see the whole frame's
        values exactly."""
        fh, fw = self.config.field_shape
        h, w = int(shape[0]), int(shape[1])
        origin = torch.as_tensor(origin, dtype=torch.float32)
        dev = origin.device
        rows = origin[..., 0, None] + torch.arange(h, dtype=torch.float32, device=dev)  # (..., h)
        cols = origin[..., 1, None] + torch.arange(w, dtype=torch.float32, device=dev)  # (..., w)
        cy = (2.0 * rows / (fh - 1) - 1.0)[..., :, None].expand(*rows.shape, w)
        cx = (2.0 * cols / (fw - 1) - 1.0)[..., None, :].expand(*cols.shape[:-1], h, w)
        return torch.stack([cx, cy], dim=-3)

    def padded_shape(self, height: int, width: int) -> tuple[int, int]:
        """(H', W'): H and W rounded up to multiples of ``downsample_factor``."""
        f = self.downsample_factor
        return -(-height // f) * f, -(-width // f) * f

    def pad(self, x_norm: torch.Tensor) -> torch.Tensor:
        """Zero-pad a *normalized* tensor ``(..., H, W)`` at the bottom and right to ``padded_shape(H, W)``.

        Zero in normalized units is a pixel at the frame's level (``input_offset`` photons for 'linear').
        """
        h, w = x_norm.shape[-2:]
        ph, pw = self.padded_shape(h, w)
        if (ph, pw) == (h, w):
            return x_norm
        return F.pad(x_norm, (0, pw - w, 0, ph - h))

    def frame_features(self, x_norm: torch.Tensor) -> torch.Tensor:
        """Per-frame features: normalized frames ``(M, C, H', W')`` -> ``(M, config.feature_channels, H' / r,
        W' / r)``, r = ``config.unshuffle`` (1: ``(M, inter_features, H', W')``).

        C = ``config.input_channels``; H', W' must be multiples of ``downsample_factor``. Frames are
        independent (batch of M frames). A folded network's features stay folded: ``temporal`` takes them so, and
        unfolding them only to fold them again cost 13 % of the network's time in OpenVINO (ad hoc, 2-core EPYC).
        """
        c = self.config.input_channels
        if x_norm.ndim != 4 or x_norm.shape[1] != c:
            raise ValueError(f"frame_features expects (M, {c}, H', W'), got {tuple(x_norm.shape)}")
        return self._run(self.frame_unet, self._fold(x_norm))

    def temporal(self, f_prev: torch.Tensor, f_mid: torch.Tensor, f_next: torch.Tensor) -> torch.Tensor:
        """Features of frames t-1, t, t+1 (each as ``frame_features`` gives them) -> output ``(N, 10, H', W')``.

        The output is float32 in physical units (``OUTPUT_CHANNELS``), also under autocast.
        """
        return self.activate(self.temporal_raw(f_prev, f_mid, f_next))

    def activate(self, raw: torch.Tensor, *, in_place: bool = False) -> torch.Tensor:
        """Raw head outputs ``(N, 10, ...)`` -> physical units, computed in float32 (autocast disabled).

        ``in_place``: written over ``raw`` (a float32 tensor of the caller's own that autograd does not need), the
        same numbers bit for bit in half the time (0.75 against 1.69 ms for 2 frames of 256² on the 2-core AMX Xeon):
        what the int8 engine does with its corrected output."""
        cfg = self.config
        if in_place and raw.dtype == torch.float32 and not raw.requires_grad:
            return self._activate_in_place(raw)
        with torch.autocast(device_type=raw.device.type, enabled=False):
            raw = raw.float()
            p_logit = raw[:, 0:1]
            photons = torch.sigmoid(raw[:, 1:2]) * cfg.photon_scale
            dxdy = torch.tanh(raw[:, 2:4])
            # a 2-D model predicts no z: the channel is 0 so that downstream z is never noise
            z = torch.tanh(raw[:, 4:5]) * cfg.z_scale if cfg.use_z else torch.zeros_like(raw[:, 4:5])
            sigmas = torch.sigmoid(raw[:, 5:9]) * cfg.sigma_max * self._sigma_unit + self._sigma_floor
            bg = torch.sigmoid(raw[:, 9:10])
            bg = (bg * bg if cfg.bg_param == "sqrt" else bg) * cfg.bg_scale
            return torch.cat([p_logit, photons, dxdy, z, sigmas, bg], dim=1)

    def _activate_in_place(self, raw: torch.Tensor) -> torch.Tensor:
        """``activate`` over ``raw`` itself: each channel group's operations in ``activate``'s order."""
        cfg = self.config
        with torch.no_grad():
            raw[:, 1:2].sigmoid_().mul_(cfg.photon_scale)
            raw[:, 2:4].tanh_()
            if cfg.use_z:
                raw[:, 4:5].tanh_().mul_(cfg.z_scale)
            else:
                raw[:, 4:5].zero_()
            raw[:, 5:9].sigmoid_().mul_(cfg.sigma_max).mul_(self._sigma_unit).add_(self._sigma_floor)
            bg = raw[:, 9:10].sigmoid_()
            if cfg.bg_param == "sqrt":
                bg.mul_(bg)
            bg.mul_(cfg.bg_scale)
        return raw

    def forward(self, x: torch.Tensor, read_var: torch.Tensor | float | None = None,
                level: torch.Tensor | None = None, origin: torch.Tensor | None = None) -> torch.Tensor:
        """Frames in photons ``(N, 3, H, W)`` (t-1, t, t+1), any H, W >= 1 -> output ``(N, 10, H, W)``.

        ``read_var``: read-noise variance in photons², a number or ``(N, H, W)`` / ``(N, 1, H, W)`` map;
        ``level``: ``(N, 3)`` per-frame levels (default ``frame_level(x)``; training may perturb it);
        ``origin``: ``(N, 2)`` or ``(2,)`` (row, col) px of the windows' pixel (0, 0) in the whole frame (models
        with ``field_shape``; default 0, 0).
        Exactly, and this is the convention a tiled executor must reproduce:

        1. ``x_norm = normalize(x, level, read_var)`` ``(N, 3, C, H, W)``, pointwise given the per-frame
           levels, which come from the whole frames;
        2. ``x_norm`` is zero-padded at the **bottom and right** to ``(H', W') = padded_shape(H, W)``, the next
           multiples of ``downsample_factor`` (``pad``); the padded pixels therefore read as the frame's level,
           and every conv layer additionally zero-pads (in feature space) at the edge of the
           ``(H', W')`` frame;
        3. each of the 3 frames goes through ``frame_features`` (same weights) -> ``(N, C, H', W')`` each;
        4. ``temporal(f_prev, f_mid, f_next)`` -> ``(N, 10, H', W')`` float32, physical units;
        5. the result is cropped to ``[..., :H, :W]``.

        Tiles are therefore tiles of the **padded normalized** frame ``(H', W')``: origins and sizes multiples
        of ``downsample_factor`` in its coordinates, a halo of at least ``receptive_field()`` px on every side
        that is not the padded frame's edge, and only the halo-free interior kept. Such a tile reproduces the
        whole-frame output up to float rounding (tested: max difference <= 1e-5 in fp32, in scaled units, i.e.
        output divided by ``config.output_scales()``).
        """
        if x.ndim != 4 or x.shape[1] != CONTEXT_FRAMES:
            raise ValueError(f"DecodeNet expects (N, 3, H, W) frames, got {tuple(x.shape)}")
        n, _, h, w = x.shape
        if h < 1 or w < 1:
            raise ValueError(f"DecodeNet needs H, W >= 1, got {h}x{w}")
        if isinstance(read_var, torch.Tensor) and read_var.ndim == 3:
            read_var = read_var[:, None]  # one map for the three frames of a window
        if isinstance(origin, torch.Tensor) and origin.ndim == 2:
            origin = origin[:, None]  # one place for the three frames of a window
        x_norm = self.pad(self.normalize(x, level, read_var, origin))
        ph, pw = x_norm.shape[-2:]
        feats = self.frame_features(x_norm.reshape(n * CONTEXT_FRAMES, -1, ph, pw))
        feats = feats.view(n, CONTEXT_FRAMES, *feats.shape[1:])
        out = self.temporal(feats[:, 0], feats[:, 1], feats[:, 2])
        return out[..., :h, :w]

    def temporal_raw(self, f_prev: torch.Tensor, f_mid: torch.Tensor, f_next: torch.Tensor) -> torch.Tensor:
        """``temporal`` before ``activate``: the heads' raw outputs ``(N, 10, H', W')`` (what the receptive field
        of the temporal part is measured on: no saturating sigmoid between an input pixel and the output)."""
        if not (f_prev.shape == f_mid.shape == f_next.shape) or f_mid.ndim != 4:
            raise ValueError(
                f"temporal expects three equal (N, C, H', W') tensors, got "
                f"{tuple(f_prev.shape)}, {tuple(f_mid.shape)}, {tuple(f_next.shape)}"
            )
        # folded features concatenated are the concatenation folded (channel (frame, c, block pixel) either way)
        h = self._run(self.temporal_unet, torch.cat([f_prev, f_mid, f_next], dim=1))
        # each head's k * r² channels are k channels' r x r blocks: unfolding the concatenation unfolds each head
        return self._unfold(torch.cat([_head_fp32_out(head, h) for head in self.heads.values()], dim=1))

    # ------------------------------------------------------------------ internals
    def _fold(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, C, H, W)`` -> ``(N, C r², H / r, W / r)``, r = ``config.unshuffle`` (the identity for 1)."""
        r = self.config.unshuffle
        return x if r == 1 else F.pixel_unshuffle(x, r)

    def _unfold(self, x: torch.Tensor) -> torch.Tensor:
        """``_fold``'s inverse: ``(N, C r², h, w)`` -> ``(N, C, h r, w r)``."""
        r = self.config.unshuffle
        return x if r == 1 else F.pixel_shuffle(x, r)

    def _run(self, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.config.grad_checkpointing and self.training and torch.is_grad_enabled():
            # no dropout / randomness in the network, so the RNG state need not be stashed
            return checkpoint(module, x, use_reentrant=False, preserve_rng_state=False)
        return module(x)


def _head_fp32_out(head: _Head, h: torch.Tensor) -> torch.Tensor:
    """A head whose last (1x1) conv runs in float32 also under autocast.

    Its raw output goes through a sigmoid times ``photon_scale`` (30 000 photons): rounded to bf16's 8
    significant bits it left a few hundred distinct photon counts in a whole movie. The 1x1 conv is a few
    percent of the head's work; the 3x3 conv before it keeps the autocast dtype.
    """
    x = head[1](head[0](h))
    last = head[2]
    with torch.autocast(device_type=h.device.type, enabled=False):
        return F.conv2d(x.float(), last.weight.float(), last.bias.float())


def _anscombe(x: torch.Tensor) -> torch.Tensor:
    """Variance-stabilizing transform of photon counts: ``2·sqrt(max(x, 0) + 3/8)``."""
    return 2.0 * torch.sqrt(x.clamp_min(0) + 0.375)


def measure_receptive_field(config: ModelConfig, part: str = "total") -> int:
    """Receptive-field radius (px) of ``part`` in {"total", "frame", "temporal"} of a ``DecodeNet(config)``,
    by the impulse response of a probe network of the same architecture (``decode_mem.model.receptive_field``)."""
    if part not in ("total", "frame", "temporal"):
        raise ValueError(f"part must be 'total', 'frame' or 'temporal', got {part!r}")
    return _measure_cached(config.depth, config.activation, config.upsample, part, config.unshuffle)


@functools.lru_cache(maxsize=64)
def _measure_cached(depth: int, activation: str, upsample: str, part: str, unshuffle: int = 1) -> int:
    # independent of the caller's context: no inference mode / autocast, and the global RNG is left untouched
    with (
        torch.inference_mode(False),
        torch.enable_grad(),
        torch.autocast("cpu", enabled=False),
        torch.random.fork_rng(devices=[]),
    ):
        return _measure(depth, activation, upsample, part, unshuffle)


def _measure(depth: int, activation: str, upsample: str, part: str, unshuffle: int = 1) -> int:
    probe_cfg = ModelConfig(depth=depth, features=2, inter_features=2, activation=activation, upsample=upsample,
                            unshuffle=unshuffle)
    probe = probe_of(DecodeNet(probe_cfg))
    c = probe_cfg.inter_features
    c_in = probe_cfg.input_channels
    if part == "frame":
        def fn(x: torch.Tensor) -> torch.Tensor:  # in unfolded features' pixels
            return probe._unfold(probe.frame_features(x))

        in_ch = c_in
    elif part == "temporal":

        def fn(f: torch.Tensor) -> torch.Tensor:  # in unfolded features' pixels
            return probe.temporal_raw(*(probe._fold(f[:, i * c:(i + 1) * c]) for i in range(CONTEXT_FRAMES)))

        in_ch = CONTEXT_FRAMES * c
    else:

        def fn(x: torch.Tensor) -> torch.Tensor:
            n, _, h, w = x.shape
            feats = probe.frame_features(x.reshape(n * CONTEXT_FRAMES, c_in, h, w))
            feats = feats.view(n, CONTEXT_FRAMES, *feats.shape[1:])
            return probe.temporal_raw(feats[:, 0], feats[:, 1], feats[:, 2])

        in_ch = CONTEXT_FRAMES * c_in
    return impulse_radius(fn, in_ch, probe_cfg.downsample_factor)
