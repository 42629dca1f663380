"""Whole movies, frame block by frame block: emitters -> PSF -> background -> camera noise (+ ground truth).

A movie is a pure function of ``(config, seed)``: its physics (PSF width, density, camera: ``physics``) and
the background field from their own streams, the emitters from ``BlinkingProcess`` (seeded per epoch), the
noise of frame ``t`` from its own generator ``(seed, t)``, sCMOS maps from their own stream. The background
field is fixed; with ``bg_bleach`` its level decays over time. So the block size changes memory and speed,
never the result, and the first ``n`` frames of a longer movie are the movie of ``n`` frames (on one device
type: CPU and CUDA generators differ; on CUDA, ``index_add_`` sums in a nondeterministic order, which can
move a rounded count).

With ``config.structure`` the emitters are the blinks of fixed sites (``structures``, ``sites``), drawn from
their own stream; with ``config.drift_nm`` every emitter of frame ``t`` is shifted by the stage drift
``d(t)`` (``stage_drift``), in the images and in the ground truth alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import torch

from decode_mem.io.camera import Camera, PixelMaps
from decode_mem.io.table import EmitterTable
from decode_mem.simulate.config import SimulationConfig
from decode_mem.simulate.emitters import (
    STREAM_BG,
    STREAM_DRIFT,
    STREAM_NOISE,
    STREAM_PHYSICS,
    STREAM_SENSOR,
    STREAM_STRUCTURE,
    BlinkingProcess,
    FrameRows,
    seeded_generator,
)
from decode_mem.simulate.noise import background, camera_adu, sensor_maps
from decode_mem.simulate.physics import draw_physics
from decode_mem.simulate.psf import render_emitters
from decode_mem.simulate.sites import SiteBlinking, Sites, make_sites
from decode_mem.simulate.stage_drift import StageDrift

BLOCK_PIXELS = 1 << 22  # default block: about this many pixels (16 MB per float32 temporary)


def default_block(config: SimulationConfig) -> int:
    """Frames per block such that one block holds about 4 M pixels (at least 1 frame)."""
    return max(1, BLOCK_PIXELS // (config.height * config.width))


def inside_frame(config: SimulationConfig, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Emitter centres inside the frame: x in [−0.5, W − 0.5), y in [−0.5, H − 0.5)."""
    h, w = config.frame_size
    return (x >= -0.5) & (x < w - 0.5) & (y >= -0.5) & (y < h - 0.5)


def bg_at(bg: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Background (..., H, W) at the nearest pixel of each position (clamped into the frame)."""
    h, w = bg.shape[-2:]
    col = torch.round(x).long().clamp(0, w - 1)
    row = torch.round(y).long().clamp(0, h - 1)
    return bg[..., row, col]


def rows_to_table(config: SimulationConfig, rows: FrameRows, bg: torch.Tensor,
                  level: torch.Tensor | None = None, t0: int = 0) -> EmitterTable:
    """In-frame ground-truth rows as an EmitterTable (sorted by frame; bg from the (H, W) field, times
    ``level[frame - t0]`` when the background level changes over time)."""
    rows = rows.select(torch.nonzero(inside_frame(config, rows.x, rows.y)).squeeze(1))
    order = torch.sort(rows.frame, stable=True).indices
    rows = rows.select(order)
    bg_rows = bg_at(bg, rows.x, rows.y)
    if level is not None:
        bg_rows = bg_rows * level[rows.frame - t0]
    return EmitterTable.from_arrays(
        frame=rows.frame.cpu().numpy(), x=rows.x.cpu().numpy(), y=rows.y.cpu().numpy(),
        z=rows.z.cpu().numpy(), photons=rows.photons.cpu().numpy(), bg=bg_rows.cpu().numpy())


@dataclass(frozen=True)
class MovieBlock:
    """Frames ``[t0, t0 + n)`` of a movie.

    ``expected``: (n, H, W) float32 noise-free photons on the sensor (spots + background);
    ``adu``: (n, H, W) float32 noisy camera counts (integers in [0, 65535]);
    ``gt``: EmitterTable of the in-frame emitters of these frames (absolute 0-based frames, drifted positions);
    ``drift``: (n, 2) float64 stage drift (dx, dy) in nm of these frames, or None for a movie without drift.
    """

    t0: int
    expected: torch.Tensor
    adu: torch.Tensor
    gt: EmitterTable
    drift: np.ndarray | None = None

    @property
    def adu_uint16(self) -> np.ndarray:
        return self.adu.cpu().numpy().astype(np.uint16)


class MovieSimulator:
    """Simulates one movie block by block in increasing frame order; state does not grow with the movie.

    ``camera`` is the movie's camera (drawn when the config has ``camera_kinds``), ``sensor`` its per-pixel
    sCMOS maps (or None), ``sigma0`` its in-focus PSF σ (σx, σy) in px, ``sites`` its structure's binding
    sites (or None), ``drift`` its stage drift (or None).
    """

    def __init__(self, config: SimulationConfig, seed: int = 0, device: torch.device | str = "cpu") -> None:
        self.config = config
        self.seed = int(seed)
        self.device = torch.device(device)
        physics = draw_physics(config, 1, seeded_generator(self.seed, STREAM_PHYSICS, device=self.device))
        self.camera: Camera = physics.cameras[0]
        self.sigma0 = tuple(float(v) for v in physics.sigma0[0])
        varies = any(r is not None for r in (config.density_range, config.pixel_size_range, config.on_time_range))
        rate = float(physics.start_rates(config)[0]) if varies else None
        on_time = float(physics.on_time[0]) if config.on_time_range is not None else None
        self.sites: Sites | None = None
        self.process: BlinkingProcess
        if config.structure.enabled:
            self.sites = self._sites()
            self.process = SiteBlinking(config, self.sites, self.seed, self.device, on_time=on_time)
        else:
            self.process = BlinkingProcess(config, self.seed, self.device, rate=rate, on_time=on_time)
        self.drift = (StageDrift.draw(config.drift_nm, config.drift_frames, self.seed, STREAM_DRIFT)
                      if config.drift_nm > 0 else None)
        self.bg = background(config, 1, seeded_generator(self.seed, STREAM_BG, device=self.device))[0]
        self.sensor: PixelMaps | None = None
        spread = float(physics.sensor_variation[0])
        if self.camera.kind == "scmos" and spread > 0:
            gen = seeded_generator(self.seed, STREAM_SENSOR, device=self.device)
            self.sensor = sensor_maps(self.camera, config.frame_size, spread, gen)

    def _sites(self) -> Sites:
        """The structure's sites (CPU generator: the same sites on every device). Placed over the frame +
        margin + ``drift_nm``, so that the sites drifting into the frame are there too."""
        cfg = self.config
        pad = cfg.drift_nm / self.camera.pixel_size
        (x0, x1), (y0, y1) = cfg.extent
        extent = ((x0 - pad, x1 + pad), (y0 - pad, y1 + pad))
        gen = seeded_generator(self.seed, STREAM_STRUCTURE)
        return make_sites(cfg.structure, extent, self.camera.pixel_size, cfg.z_range if cfg.is_3d else None, gen)

    def drift_nm(self, t0: int, t1: int) -> np.ndarray | None:
        """(t1 − t0, 2) stage drift (dx, dy) in nm of frames ``[t0, t1)``, or None without drift."""
        return None if self.drift is None else self.drift(np.arange(t0, t1))

    def bg_level(self, t0: int, t1: int) -> torch.Tensor | None:
        """Relative background level of frames ``[t0, t1)`` (``bg_bleach``), or None when constant."""
        if self.config.bg_bleach == 0:
            return None
        t = torch.arange(t0, t1, device=self.device, dtype=torch.float64)
        return ((1 - self.config.bg_bleach) ** (t / 1000.0)).float()

    def block(self, t0: int, t1: int) -> MovieBlock:
        cfg = self.config
        _, rows = self.process.rows(t0, t1)
        drift = self.drift_nm(t0, t1)
        if drift is not None:  # the sample moved by d(t): every emitter of frame t appears shifted by it
            shift = torch.from_numpy(drift / self.camera.pixel_size).to(self.device)
            offset = rows.frame - t0
            rows = replace(rows, x=(rows.x + shift[offset, 0]).float(), y=(rows.y + shift[offset, 1]).float())
        expected = torch.zeros((t1 - t0, *cfg.frame_size), device=self.device)
        sigma0 = torch.tensor([self.sigma0], device=self.device).expand(len(rows), 2)
        render_emitters(cfg, expected, rows.frame - t0, rows.x, rows.y, rows.z, rows.photons, sigma0, rows.width)
        level = self.bg_level(t0, t1)
        expected += self.bg if level is None else self.bg * level[:, None, None]
        adu = torch.empty_like(expected)
        for i in range(t1 - t0):
            gen = seeded_generator(self.seed, STREAM_NOISE, t0 + i, device=self.device)
            adu[i] = camera_adu(expected[i], self.camera, gen, self.sensor)
        return MovieBlock(t0, expected, adu, rows_to_table(cfg, rows, self.bg, level, t0), drift)

    def blocks(self, n_frames: int, block: int | None = None) -> Iterator[MovieBlock]:
        block = default_block(self.config) if block is None else int(block)
        if block < 1:
            raise ValueError(f"block must be >= 1 frame, got {block}")
        for t0 in range(0, n_frames, block):
            yield self.block(t0, min(n_frames, t0 + block))


def simulate_movie(config: SimulationConfig, n_frames: int, seed: int = 0, device: torch.device | str = "cpu",
                   block: int | None = None) -> tuple[np.ndarray, EmitterTable, np.ndarray]:
    """A whole movie in memory (small sizes): ``(adu (T, H, W) uint16, ground truth, bg (H, W) float32)``.

    The background is constant in time (photons/px). Use ``simulate_stack`` to write big movies to disk.
    """
    sim = MovieSimulator(config, seed, device)
    adu = np.empty((int(n_frames), *config.frame_size), dtype=np.uint16)
    tables = []
    for blk in sim.blocks(int(n_frames), block):
        adu[blk.t0:blk.t0 + len(blk.adu)] = blk.adu_uint16
        tables.append(blk.gt)
    gt = EmitterTable.concat(tables) if tables else EmitterTable.empty()
    return adu, gt, sim.bg.cpu().numpy().astype(np.float32)
