"""Simulated movies for the calibration tests (64 x 64 px, 150 frames), built once per session."""

from __future__ import annotations

import functools

import numpy as np
from scipy.spatial import cKDTree

from decode_mem.io.camera import Camera
from decode_mem.simulate import SimulationConfig, simulate_movie

PHOTONS_MEAN, PHOTONS_STD = 3000.0, 900.0  # lognormal flux (photons per full frame on)
FRAMES = 150


def config(sigma: float = 1.0, bg: float = 100.0, kind: str = "emccd", **extra) -> SimulationConfig:
    camera = Camera.emccd() if kind == "emccd" else Camera.scmos()
    params = dict(frame_size=(64, 64), density=0.5, photons_dist="lognormal", photons_mean=PHOTONS_MEAN,
                  photons_std=PHOTONS_STD, on_time=2.0, bg=(bg, bg), psf_sigma=(sigma, sigma), camera=camera)
    params.update(extra)
    return SimulationConfig(**params)


@functools.cache
def movie(sigma: float = 1.0, bg: float = 100.0, kind: str = "emccd", seed: int = 0, **extra):
    """(adu uint16 (T, H, W), ground truth, bg map, config) of one simulated movie (cached)."""
    cfg = config(sigma, bg, kind, **extra)
    adu, gt, bg_map = simulate_movie(cfg, FRAMES, seed=seed)
    adu.setflags(write=False)
    return adu, gt, bg_map, cfg


def flux_median() -> float:
    """Median of the simulated lognormal flux: mean / sqrt(1 + cv²)."""
    return PHOTONS_MEAN / np.sqrt(1 + (PHOTONS_STD / PHOTONS_MEAN) ** 2)


def matched_gt_photons(locs: dict, gt) -> np.ndarray:
    """Ground-truth photons (that frame) of the emitters that the photometry localizations found within 1 px."""
    out = []
    ok = locs["photometry"].astype(bool)
    for f in np.unique(locs["frame"][ok]):
        mine = ok & (locs["frame"] == f)
        theirs = gt["frame"] == f
        if not theirs.any():
            continue
        d, i = cKDTree(np.column_stack([gt["x"][theirs], gt["y"][theirs]])).query(
            np.column_stack([locs["x"][mine], locs["y"][mine]]))
        out.append(gt["photons"][theirs][i[d < 1.0]])
    return np.concatenate(out)
