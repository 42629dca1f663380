"""Point-spread functions: pixel-integrated 2D Gaussian and astigmatic 3D Gaussian, rendered in batches.

Coordinates follow DESIGN.md §3: ``x`` is the column, ``y`` the row, pixel ``j`` covers ``[j − 0.5, j + 0.5)``.
A spot is the Gaussian integrated exactly over each pixel (differences of ``erf``), which is separable:
``patch = photons · e_y ⊗ e_x``. All spots of a batch are evaluated at once on small square patches of
``2·ceil(4σ_max) + 1`` px around their centre pixel and scatter-added into the frames
(``index_add_``), never one full-frame evaluation per emitter. Photons are conserved up to the Gaussian
tail beyond 4σ (< 1e-4) and whatever falls outside the frame.
"""

from __future__ import annotations

import math

import torch

from decode_mem.simulate.config import AstigmatismCalibration, SimulationConfig
from decode_mem.simulate.derived import PATCH_SIGMAS

_SQRT2 = math.sqrt(2.0)
_CHUNK_ELEMENTS = 1 << 20  # patch pixels per scatter call: bounds the temporaries to ~30 MB


def astig_sigma(z: torch.Tensor, sigma0: tuple[float, float],
                calib: AstigmatismCalibration) -> tuple[torch.Tensor, torch.Tensor]:
    """σx(z), σy(z) in px: ``σ0·sqrt(1 + u² + cubic·u³ + quartic·u⁴)``, ``u = (z − focal_offset)/depth``."""
    out = []
    for axis in range(2):
        u = (z - calib.focal_offset[axis]) / calib.depth[axis]
        q = 1 + u * u + calib.cubic[axis] * u**3 + calib.quartic[axis] * u**4
        out.append(sigma0[axis] * torch.sqrt(q.clamp_min(1e-4)))
    return out[0], out[1]


def psf_sigmas(config: SimulationConfig, z: torch.Tensor, sigma0: torch.Tensor | None = None,
               width: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """σx, σy in px of each emitter at depth ``z`` (nm) under the configured PSF.

    ``sigma0`` (N, 2): each emitter's in-focus σ0 (its movie's, ``physics.draw_physics``; default
    ``config.psf_sigma``); ``width`` (N,): each emitter's relative width (default 1).
    """
    if sigma0 is None:
        s0x = torch.full_like(z, config.psf_sigma[0])
        s0y = torch.full_like(z, config.psf_sigma[1])
    else:
        s0x, s0y = sigma0[:, 0].to(z.dtype), sigma0[:, 1].to(z.dtype)
    if config.is_3d:
        sx, sy = astig_sigma(z, (1.0, 1.0), config.astigmatism)
        sx, sy = sx * s0x, sy * s0y
    else:
        sx, sy = s0x, s0y
    if width is not None:
        sx, sy = sx * width.to(z.dtype), sy * width.to(z.dtype)
    return sx, sy


def patch_size_for(sigma_max: float) -> int:
    """Edge of a square patch that holds a spot of width ``sigma_max`` to ±4σ: ``2·ceil(4σ) + 1``."""
    return 2 * math.ceil(PATCH_SIGMAS * sigma_max) + 1


def integrated_gaussian_1d(centre: torch.Tensor, sigma: torch.Tensor, first: torch.Tensor,
                           size: int) -> torch.Tensor:
    """Fraction of a unit 1D Gaussian in each of ``size`` pixels starting at integer ``first``: (N, size)."""
    edges = first.to(centre.dtype)[:, None] + torch.arange(size + 1, device=centre.device, dtype=centre.dtype) - 0.5
    cdf = torch.special.erf((edges - centre[:, None]) / (_SQRT2 * sigma[:, None]))
    return 0.5 * (cdf[:, 1:] - cdf[:, :-1])


def gaussian_patches(x: torch.Tensor, y: torch.Tensor, sigma_x: torch.Tensor, sigma_y: torch.Tensor,
                     size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Unit-flux pixel-integrated Gaussians on ``size × size`` patches centred on each spot's pixel.

    Returns ``(patches (N, size, size), col0 (N,), row0 (N,))``: patch pixel ``[i, j]`` is frame pixel
    ``[row0 + i, col0 + j]``.
    """
    half = size // 2
    col0 = torch.round(x).long() - half
    row0 = torch.round(y).long() - half
    ex = integrated_gaussian_1d(x, sigma_x, col0, size)
    ey = integrated_gaussian_1d(y, sigma_y, row0, size)
    return ey[:, :, None] * ex[:, None, :], col0, row0


def render_spots(canvas: torch.Tensor, frame: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                 photons: torch.Tensor, sigma_x: torch.Tensor, sigma_y: torch.Tensor,
                 size: int | None = None) -> torch.Tensor:
    """Add spots into ``canvas`` (T, H, W) in place and return it.

    ``frame`` (N,) indexes the canvas' first axis; ``x``, ``y`` in px; ``photons`` per spot; ``sigma_*`` px.
    Parts of a patch outside the canvas are dropped (no clipping of the position, no wrap-around).
    ``size`` defaults to ``patch_size_for(max σ)``, which costs one device sync; pass it to avoid that.
    """
    if canvas.dim() != 3:
        raise ValueError(f"render_spots: canvas must be (T, H, W), got shape {tuple(canvas.shape)}")
    n = frame.numel()
    if n == 0:
        return canvas
    t, h, w = canvas.shape
    if size is None:
        size = patch_size_for(float(torch.maximum(sigma_x.max(), sigma_y.max())))
    dtype = canvas.dtype
    flat = canvas.view(-1)
    offs = torch.arange(size, device=canvas.device)
    step = max(1, _CHUNK_ELEMENTS // (size * size))
    for s in range(0, n, step):
        sl = slice(s, min(n, s + step))
        patches, col0, row0 = gaussian_patches(x[sl].to(dtype), y[sl].to(dtype), sigma_x[sl].to(dtype),
                                               sigma_y[sl].to(dtype), size)
        values = patches * photons[sl].to(dtype)[:, None, None]
        cols = col0[:, None] + offs  # (n, size)
        rows = row0[:, None] + offs
        f = frame[sl].long()
        valid = (((cols >= 0) & (cols < w))[:, None, :] & ((rows >= 0) & (rows < h))[:, :, None]
                 & ((f >= 0) & (f < t))[:, None, None])
        index = (f[:, None, None] * h + rows[:, :, None]) * w + cols[:, None, :]
        invalid = ~valid  # masked to index 0 with value 0: no sync, no boolean indexing
        index.masked_fill_(invalid, 0)
        values.masked_fill_(invalid, 0.0)
        flat.index_add_(0, index.reshape(-1), values.reshape(-1))
    return canvas


def render(shape: tuple[int, int, int], frame: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
           photons: torch.Tensor, sigma_x: torch.Tensor, sigma_y: torch.Tensor, size: int | None = None,
           dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Noise-free photon frames (T, H, W) of the given spots, on the spots' device."""
    canvas = torch.zeros(shape, dtype=dtype, device=x.device)
    return render_spots(canvas, frame, x, y, photons, sigma_x, sigma_y, size)


def render_emitters(config: SimulationConfig, canvas: torch.Tensor, frame: torch.Tensor, x: torch.Tensor,
                    y: torch.Tensor, z: torch.Tensor, photons: torch.Tensor, sigma0: torch.Tensor | None = None,
                    width: torch.Tensor | None = None, field_x: torch.Tensor | None = None,
                    field_y: torch.Tensor | None = None) -> torch.Tensor:
    """Add emitters (z in nm) with the configured PSF into ``canvas`` (T, H, W) in place (see ``psf_sigmas``;
    a spline PSF takes no ``sigma0``: its file sets the width). A PSF that changes across the field
    (``config.field_psf``) renders each emitter with the PSF of its field position ``field_x``, ``field_y`` px
    (default ``x``, ``y``: the canvas is the field)."""
    field = config.field_psf() if config.psf in ("spline", "pupil") else None
    if field is not None:
        width = width if config.psf_sigma_jitter > 0 else None
        return field.render_spots(canvas, frame, x, y, z, photons, width, config.patch_size, field_x, field_y)
    if config.psf in ("spline", "pupil"):
        spline = config.spline_psf()
        width = width if config.psf_sigma_jitter > 0 else None  # all ones: the faster shared-monomial path
        return spline.render_spots(canvas, frame, x, y, z, photons, width, config.patch_size)
    sx, sy = psf_sigmas(config, z.to(canvas.dtype), sigma0, width)
    return render_spots(canvas, frame, x, y, photons, sx, sy, config.patch_size)
