"""The DECODE-style loss: count + localization (Gaussian mixture over pixels) + background.

Per frame, with ``p_k = sigmoid(p_logit_k)`` the detection probability of pixel k and E true emitters:

* **count**: ``mu = sum_k p_k``, ``var = max(sum_k p_k (1 - p_k), count_var_min)``;
  ``L_count = -log N(E; mu, var)`` (Gaussian approximation of the Poisson-binomial count; full
  log-density, including ``0.5 log(2 pi var)``). Unlike DECODE's code it is *not* multiplied by E, so frames
  without emitters also teach the network to predict nothing; the ``var`` floor bounds the term from below
  (``0.5 log(2 pi count_var_min)``) and keeps its gradient finite.
* **loc**: each true emitter ``u = (photons, x, y[, z])`` is scored under a mixture over all pixels, weights
  ``pi_k = p_k / sum_j p_j`` (computed as ``logsigmoid - logsumexp(logsigmoid)``), components diagonal
  Gaussians with means ``(photons_k, col_k + dx_k, row_k + dy_k, z_k)`` and the predicted sigmas;
  ``L_loc = -sum_e log sum_k pi_k N(u_e; mean_k, sigma_k^2)`` (log-sum-exp over pixels). Every dimension is
  expressed in scaled units first: photons / photon_scale, x and y in px, z / z_scale. A 2-D model
  (``ModelConfig.use_z=False``) drops the z dimension.
* **bg**: ``bg_loss='scaled'``: ``sum_pixels(((bg_pred - bg_true) / bg_scale)^2)``, a sum over the frame's
  pixels as in DECODE (a per-pixel mean of errors relative to ``bg_scale`` would be ~H*W times smaller than
  the other terms and the background barely learnt); ``'noise'``: ``mean_pixels(((bg_pred - bg_true) / u)^2)``
  with ``u = sqrt(bg_true + 1)`` the pixel's Poisson noise, so errors count alike from 5 to 5000 photons/px
  and a background known to a tenth of the noise costs 0.01 per frame, whatever the crop size.

``total = count_weight * count + loc_weight * loc + bg_weight * bg``; every term is averaged over the
frames of the batch. Everything runs in float32 with autocast disabled, whatever the output's dtype.

Targets (the dataset's contract): ``em`` float (N, K, 4) with columns x_px, y_px, z_nm, photons (pixel
centres at integer coordinates, x = column, y = row); ``mask`` bool (N, K), True for real emitters (rows with
False are ignored whatever they contain); ``bg`` float (N, H, W) in photons / px.

Memory: the mixture is evaluated densely as float32 tensors of shape (N, K', H*W), K' = number of target
slots used by at least one frame of the batch (unused slots are dropped first); about three of them per
dimension are kept for backward, i.e. roughly ``(3 * n_dims + 2) * 4 * N * K' * H * W`` bytes, e.g. ~0.25 GB
for N=32, K'=32, 64x64 crops with z (0.22 GB measured). Fine for training crops; whole large frames with many
emitters would need chunking over K (not implemented).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from decode_mem.config import check_keys
from decode_mem.errors import ConfigError
from decode_mem.model.net import CHANNEL_INDEX, N_OUTPUT_CHANNELS, ModelConfig

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True)
class LossConfig:
    """Weights of the three loss terms, 2-D / 3-D switch and the count-variance floor."""

    count_weight: float = 1.0
    loc_weight: float = 1.0
    bg_weight: float = 1.0
    count_var_min: float = 0.01
    bg_loss: str = "noise"  # "noise" | "scaled" (module docstring)

    def __post_init__(self) -> None:
        if self.bg_loss not in ("noise", "scaled"):
            raise ConfigError(f"loss.bg_loss must be 'noise' or 'scaled', got {self.bg_loss!r}")
        for name in ("count_weight", "loc_weight", "bg_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"loss.{name} must be a finite number >= 0, got {value!r}")
        v = self.count_var_min
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ConfigError(f"loss.count_var_min must be a positive finite number, got {v!r}")

    @classmethod
    def from_dict(cls, params: dict[str, Any]) -> LossConfig:
        """Build from a mapping (YAML); unknown keys are an error naming the key."""
        check_keys(cls, params, "loss")
        return cls(**params)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LossTerms:
    """Scalar float32 tensors, each the mean over the frames of the batch; ``total`` is the weighted sum."""

    total: torch.Tensor
    count: torch.Tensor
    loc: torch.Tensor
    bg: torch.Tensor

    def as_floats(self) -> dict[str, float]:
        """Python floats for logging (synchronizes with the device)."""
        return {f.name: float(getattr(self, f.name).detach()) for f in fields(self)}


def decode_loss(
    output: torch.Tensor,
    em: torch.Tensor,
    mask: torch.Tensor,
    bg: torch.Tensor,
    cfg: LossConfig | None = None,
    *,
    photon_scale: float,
    z_scale: float,
    bg_scale: float,
    use_z: bool = True,
    compact: bool = True,
) -> LossTerms:
    """Loss of a network ``output`` (N, 10, H, W) (physical units, ``OUTPUT_CHANNELS``) against targets.

    ``em`` (N, K, 4) x_px, y_px, z_nm, photons; ``mask`` (N, K) bool; ``bg`` (N, H, W) photons / px.
    K may be 0 and frames may have no emitter (then only the count and bg terms are non-zero).
    The scales are those of the model (``ModelConfig.photon_scale``, ``z_scale``, ``bg_scale``).
    ``compact``: drop the target slots no frame uses first (less memory; the number kept depends on the data,
    so the memory planner, which traces shapes without data, passes False with the slots it plans for).
    """
    cfg = cfg if cfg is not None else LossConfig()
    if output.ndim != 4 or output.shape[1] != N_OUTPUT_CHANNELS:
        raise ValueError(f"output must be (N, {N_OUTPUT_CHANNELS}, H, W), got {tuple(output.shape)}")
    n, _, h, w = output.shape
    if em.ndim != 3 or em.shape[0] != n or em.shape[2] != 4:
        raise ValueError(f"em must be (N={n}, K, 4), got {tuple(em.shape)}")
    if tuple(mask.shape) != tuple(em.shape[:2]):
        raise ValueError(f"mask must be (N, K) = {tuple(em.shape[:2])}, got {tuple(mask.shape)}")
    if tuple(bg.shape) != (n, h, w):
        raise ValueError(f"bg must be (N, H, W) = {(n, h, w)}, got {tuple(bg.shape)}")

    with torch.autocast(device_type=output.device.type, enabled=False):
        out = output.float()
        mask = mask.to(device=out.device, dtype=torch.bool)
        em = em.to(device=out.device, dtype=torch.float32)
        bg = bg.to(device=out.device, dtype=torch.float32)

        logit = out[:, CHANNEL_INDEX["p_logit"]].reshape(n, h * w)
        log_p = F.logsigmoid(logit)
        p = torch.sigmoid(logit)

        # count: Gaussian approximation of the Poisson-binomial number of detections
        n_true = mask.sum(dim=1).to(torch.float32)
        mu = p.sum(dim=1)
        var = (p * (1.0 - p)).sum(dim=1).clamp_min(cfg.count_var_min)
        count = 0.5 * (n_true - mu) ** 2 / var + 0.5 * torch.log(var) + _LOG_SQRT_2PI

        loc = _loc_nll(out, log_p, em, mask, use_z, photon_scale, z_scale, compact)

        bg_pred = out[:, CHANNEL_INDEX["bg"]]
        if cfg.bg_loss == "noise":
            bg_term = ((bg_pred - bg) ** 2 / (bg.clamp_min(0) + 1.0)).mean(dim=(1, 2))
        else:
            bg_term = (((bg_pred - bg) / bg_scale) ** 2).sum(dim=(1, 2))

        count, loc, bg_term = count.mean(), loc.mean(), bg_term.mean()
        total = cfg.count_weight * count + cfg.loc_weight * loc + cfg.bg_weight * bg_term
    return LossTerms(total=total, count=count, loc=loc, bg=bg_term)


def _loc_nll(
    out: torch.Tensor,
    log_p: torch.Tensor,
    em: torch.Tensor,
    mask: torch.Tensor,
    use_z: bool,
    photon_scale: float,
    z_scale: float,
    compact: bool = True,
) -> torch.Tensor:
    """Per-frame GMM negative log-likelihood of the true emitters, (N,)."""
    n, _, h, w = out.shape
    if compact and em.shape[1] > 0:
        used = mask.any(dim=0)  # drop target slots no frame uses (saves (N, K, HW) memory)
        em, mask = em[:, used], mask[:, used]
    if em.shape[1] == 0:
        return out.new_zeros(n)
    em = torch.where(mask[..., None], em, torch.zeros((), device=em.device))  # masked rows may hold garbage

    rows = torch.arange(h, device=out.device, dtype=torch.float32).view(1, h, 1)
    cols = torch.arange(w, device=out.device, dtype=torch.float32).view(1, 1, w)
    ch = CHANNEL_INDEX
    # (target (N, K), mean (N, HW), sigma (N, HW)) per dimension, in scaled units
    dims = [
        (em[..., 3] / photon_scale, out[:, ch["photons"]] / photon_scale, out[:, ch["sigma_photons"]] / photon_scale),
        (em[..., 0], cols + out[:, ch["dx"]], out[:, ch["sigma_x"]]),
        (em[..., 1], rows + out[:, ch["dy"]], out[:, ch["sigma_y"]]),
    ]
    if use_z:
        dims.append((em[..., 2] / z_scale, out[:, ch["z"]] / z_scale, out[:, ch["sigma_z"]] / z_scale))

    log_pi = log_p - torch.logsumexp(log_p, dim=1, keepdim=True)  # (N, HW) mixture weights
    log_comp = log_pi[:, None, :]
    for target, mean, sigma in dims:
        mean = mean.reshape(n, 1, h * w)
        sigma = sigma.reshape(n, 1, h * w)
        z = (target[..., None] - mean) / sigma
        log_comp = log_comp - 0.5 * z * z - torch.log(sigma) - _LOG_SQRT_2PI
    log_lik = torch.logsumexp(log_comp, dim=2)  # (N, K)
    return -torch.where(mask, log_lik, torch.zeros((), device=out.device)).sum(dim=1)


def detection_distillation(output: torch.Tensor, teacher_output: torch.Tensor) -> torch.Tensor:
    """A teacher network's detections as soft targets: per frame, the sum over pixels of the Bernoulli KL
    divergence ``KL(p_teacher || p_student)`` of the two detection probabilities, averaged over the frames (0 where
    the student detects as the teacher does; the teacher gets no gradient).

    Knowledge distillation (Hinton et al., 2015) on the channel that decides what is found: a small network
    trained on the truth alone trails the larger one in detection (Jaccard), and the teacher's probabilities say
    how sure a detection can be on each window, which a 0/1 truth does not. Float32, autocast off."""
    if output.shape != teacher_output.shape:
        raise ValueError(f"teacher output {tuple(teacher_output.shape)} != student output {tuple(output.shape)}")
    with torch.autocast(device_type=output.device.type, enabled=False):
        i = CHANNEL_INDEX["p_logit"]
        student = output[:, i].float()
        teacher = teacher_output[:, i].detach().float()
        p_t = torch.sigmoid(teacher)
        # KL(Bern(p_t) || Bern(p_s)) from logits: p_t (log p_t - log p_s) + (1 - p_t)(log(1-p_t) - log(1-p_s))
        kl = (p_t * (F.logsigmoid(teacher) - F.logsigmoid(student))
              + (1.0 - p_t) * (F.logsigmoid(-teacher) - F.logsigmoid(-student)))
        return kl.sum(dim=(1, 2)).mean()


class DecodeLoss(nn.Module):
    """``decode_loss`` as a module holding the config and the model's scales.

    ``DecodeLoss(LossConfig(...), model_config)`` ; ``terms = loss_fn(output, em, mask, bg)``;
    ``terms.total.backward()``.
    """

    def __init__(self, cfg: LossConfig | None = None, model_config: ModelConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg if cfg is not None else LossConfig()
        mc = model_config if model_config is not None else ModelConfig()
        self.photon_scale = mc.photon_scale
        self.z_scale = mc.z_scale
        self.bg_scale = mc.bg_scale
        self.use_z = mc.use_z

    def forward(self, output: torch.Tensor, em: torch.Tensor, mask: torch.Tensor, bg: torch.Tensor, *,
                compact: bool = True) -> LossTerms:
        return decode_loss(
            output,
            em,
            mask,
            bg,
            self.cfg,
            photon_scale=self.photon_scale,
            z_scale=self.z_scale,
            bg_scale=self.bg_scale,
            use_z=self.use_z,
            compact=compact,
        )
