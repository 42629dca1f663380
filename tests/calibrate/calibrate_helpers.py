"""Simulated movies for the calibration tests (64 x 64 px, 150 frames), built once per session."""

from __future__ import annotations

import functools

import numpy as np
from scipy.spatial import cKDTree

from decode_mem.io.camera import preset
from decode_mem.simulate import SimulationConfig, simulate_movie
from decode_mem.simulate.cell_on_glass import cell_on_glass

PHOTONS_MEAN, PHOTONS_STD = 3000.0, 900.0  # lognormal flux (photons per full frame on)
FRAMES = 150


def config(sigma: float = 1.0, bg: float = 100.0, kind: str = "emccd", **extra) -> SimulationConfig:
    camera = preset(kind)
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


@functools.cache
def cell_movie(sigma: float = 1.5, photons: float = 8000.0, frames: int = 60, seed: int = 0):
    """(adu, ground truth, bg map, config) of bright spots (lognormal, ``photons`` ± 30 %) on ``cell_on_glass``
    seen by the sCMOS preset: the movie of a user whose calibration once read photons 1.6x too high."""
    import torch

    from decode_mem.io.table import EmitterTable
    from decode_mem.simulate.movie import MovieSimulator

    cfg = config(sigma, 100.0, "scmos", photons_mean=photons, photons_std=0.3 * photons)
    sim = MovieSimulator(cfg, seed, "cpu")
    sim.bg = torch.from_numpy(cell_on_glass(*cfg.frame_size))  # the simulator's noise on our background
    adu = np.empty((frames, *cfg.frame_size), np.uint16)
    tables = []
    for blk in sim.blocks(frames, None):
        adu[blk.t0:blk.t0 + len(blk.adu)] = blk.adu_uint16
        tables.append(blk.gt)
    adu.setflags(write=False)
    return adu, EmitterTable.concat(tables), sim.bg.numpy(), cfg


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
