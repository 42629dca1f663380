"""Bead z-stacks for PSF calibration: fixed bright emitters imaged at a series of z planes.

Frame k shows every bead with the configured PSF at depth ``z[k] + offset`` (nm; ``offset`` per bead, e.g. a
tilted coverslip), over a constant background, with the config's camera noise. Used by tests, the 3D
pipeline and the 3D benchmark to calibrate a PSF the way a user does with real beads; ``python -m
decode_mem.simulate --beads N`` (or ``--bead_xy CSV``) ``--z_step NM`` writes one (``write_bead_stack``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from decode_mem.simulate.config import SimulationConfig
from decode_mem.simulate.noise import camera_adu
from decode_mem.simulate.psf import render_emitters


def simulate_bead_stack(config: SimulationConfig, x: np.ndarray, y: np.ndarray, z: np.ndarray, *,
                        photons: float = 20000.0, bg: float = 20.0, offset: np.ndarray | None = None,
                        seed: int = 0) -> np.ndarray:
    """(len(z), H, W) uint16 camera counts of beads at ``x``, ``y`` (px) through the planes ``z`` (nm)."""
    gen = torch.Generator().manual_seed(int(seed))
    n, t = len(x), len(z)
    off = np.zeros(n) if offset is None else np.asarray(offset, np.float64)
    frame = torch.arange(t).repeat_interleave(n)
    xs = torch.as_tensor(np.tile(x, t), dtype=torch.float32)
    ys = torch.as_tensor(np.tile(y, t), dtype=torch.float32)
    zs = torch.as_tensor((np.asarray(z, np.float64)[:, None] + off[None]).ravel(), dtype=torch.float32)
    expected = torch.zeros((t, *config.frame_size))
    render_emitters(config, expected, frame, xs, ys, zs, torch.full((n * t,), float(photons)))
    adu = camera_adu(expected + float(bg), config.camera, gen)
    return adu.round().clamp(0, 65535).numpy().astype(np.uint16)


def bead_grid(n: int, frame_size: tuple[int, int], *, seed: int = 0, border: float = 12.0) -> tuple[np.ndarray,
                                                                                                 np.ndarray]:
    """``n`` bead places (x, y px) on a jittered grid over the frame (as square as ``n`` allows), ``border`` px
    from its edges: beads spread over the whole field, for a PSF that changes across it."""
    h, w = frame_size
    cols = max(1, round(np.sqrt(n * w / h)))
    rows = -(-n // cols)
    gx, gy = np.meshgrid(np.linspace(border, w - 1 - border, cols), np.linspace(border, h - 1 - border, rows))
    rng = np.random.default_rng(seed)
    jitter = 0.15 * min((w - 2 * border) / max(cols, 1), (h - 2 * border) / max(rows, 1))
    x = gx.ravel()[:n] + rng.uniform(-jitter, jitter, n)
    y = gy.ravel()[:n] + rng.uniform(-jitter, jitter, n)
    return np.clip(x, border, w - 1 - border), np.clip(y, border, h - 1 - border)


def read_bead_places(path: str, frame_size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Bead places from a CSV of x, y in px (a header line allowed); a bad file is a ConfigError naming it."""
    from decode_mem.errors import ConfigError

    try:
        lines = [ln for ln in Path(path).read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the bead places ({e})") from None

    def numbers(line: str) -> list[float] | None:
        try:
            return [float(v) for v in line.split(",")[:2]]
        except ValueError:
            return None

    if lines and numbers(lines[0]) is None:  # a header
        lines = lines[1:]
    values = [numbers(ln) for ln in lines]
    if not values or any(v is None or len(v) < 2 or not np.isfinite(v).all() for v in values):
        raise ConfigError(f"{path}: not a CSV of bead places x, y in px (two finite numbers a row)")
    xy = np.asarray(values, np.float64)
    x, y = xy[:, 0], xy[:, 1]
    h, w = frame_size
    if (x < -0.5).any() or (y < -0.5).any() or (x > w - 0.5).any() or (y > h - 0.5).any():
        raise ConfigError(f"{path}: bead places outside the {h}x{w} px frame")
    return x, y


def write_bead_stack(config: SimulationConfig, x: np.ndarray, y: np.ndarray, frames: int, z_step: float, out: Any,
                     gt: Any = None, *, photons: float = 40000.0, seed: int = 0) -> Path:
    """A bead z-stack as ``python -m decode_mem.psf`` reads it: frame k at ``z_range[0] + k·z_step`` nm, the
    config's PSF (changing across the frame where it does) and camera, background ``config.bg``'s low end; the
    beads' places (x, y nm from the frame's corner, as the ground truth CSVs) at ``gt``. Written atomically."""
    import tifffile

    from decode_mem.io.atomic import atomic_output

    z = config.z_range[0] + float(z_step) * np.arange(int(frames))
    adu = simulate_bead_stack(config, x, y, z, photons=photons, bg=float(config.bg[0]), seed=seed)
    out = Path(out)
    with atomic_output(out) as tmp:
        tifffile.imwrite(tmp, adu, metadata=None)
    if gt is not None:
        px = config.camera.pixel_size
        with atomic_output(gt) as tmp:
            rows = "".join(f"{(a + 0.5) * px:.2f},{(b + 0.5) * px:.2f}\n" for a, b in zip(x, y, strict=True))
            Path(tmp).write_text("x [nm],y [nm]\n" + rows)
    return out
