"""Bead z-stacks for PSF calibration: fixed bright emitters imaged at a series of z planes.

Frame k shows every bead with the configured PSF at depth ``z[k] + offset`` (nm; ``offset`` per bead, e.g. a
tilted coverslip), over a constant background, with the config's camera noise. Used by tests, the 3D
pipeline and the 3D benchmark to calibrate a PSF the way a user does with real beads.
"""

from __future__ import annotations

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
