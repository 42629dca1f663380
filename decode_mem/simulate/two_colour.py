"""Two-colour movies and bead slides with their truth: one sample seen by two channels (split view or two cameras).

The emitters are those of the one-channel simulator (``MovieSimulator``: blinking, structures, stage drift), placed
in channel 1's pixels. Each emitter has a dye (``TwoColourConfig.dye_of``: a hash of its position, so a molecule
keeps its dye over all its blinks); a dye of ratio ``r`` sends ``(1 - r)`` of its photons to channel 1 and ``r`` to
channel 2, where it appears at ``ChannelMapping(x, y)`` and at depth ``z + axial_offset``. Each channel has its own
background field and camera noise (channel 2's own random streams), channel 2 its own PSF width and background
level where ``channel2`` says so. Stage drift moves the sample, so both channels see it (through the mapping).

A bead slide (``bead_slide``) is bright point sources seen in both channels (``ratio`` 0.5: TetraSpeck-like),
at chosen positions or drawn ones, for a few frames; with ``z`` planes (a 3-D PSF) it is a z-stack: frame ``k``
images the beads at depth ``z[k]`` in channel 1 and ``z[k] + axial_offset`` in channel 2.

Files (TIFF, page by page): a split view is one movie of frames with the two halves side by side
(``io.channels``; a left-right movie of channel frames ``H x W`` is ``H x 2W``), two cameras two movies
``<stem>_ch1.tif`` and ``<stem>_ch2.tif``. The truth: ``<gt>`` every emitter in channel 1's pixels with its total
photons and ``dye`` (1-based), ``<gt stem>_ch1.csv`` and ``_ch2.csv`` what each channel shows (its own pixels, its
photons, emitters inside its frame with photons in it), and ``<gt stem>_mapping.json`` the true mapping.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import tifffile
import torch

from decode_mem.config import resolve_device
from decode_mem.errors import ConfigError
from decode_mem.io.atomic import atomic_output
from decode_mem.io.channels import TWO_FILES, preset_regions
from decode_mem.io.drift import DriftWriter, drift_path
from decode_mem.io.table import EmitterTable
from decode_mem.io.thunderstorm import ThunderstormWriter
from decode_mem.simulate.colours import ChannelMapping, TwoColourConfig
from decode_mem.simulate.config import SimulationConfig
from decode_mem.simulate.emitters import STREAM_BG, STREAM_NOISE, seeded_generator
from decode_mem.simulate.movie import MovieSimulator, bg_at, default_block
from decode_mem.simulate.noise import background, camera_adu
from decode_mem.simulate.psf import render_emitters
from decode_mem.simulate.stack import BIGTIFF_BYTES, TIFF_SUFFIXES

CHANNEL2_KEY = 2  # the extra key of channel 2's random streams (noise per frame, background)


@dataclass(frozen=True)
class TwoColourBlock:
    """Frames ``[t0, t0 + n)`` of both channels: ``adu1``, ``adu2`` (n, H, W) uint16; ``truth`` (channel-1 px,
    total photons, ``dye`` 1-based), ``view1``, ``view2`` (each channel's own px and photons, with ``dye`` and
    ``channel``); ``drift`` (n, 2) nm or None."""

    t0: int
    adu1: np.ndarray
    adu2: np.ndarray
    truth: EmitterTable
    view1: EmitterTable
    view2: EmitterTable
    drift: np.ndarray | None = None


class TwoColourSimulator:
    """One two-colour movie block by block (module docstring); as ``MovieSimulator``, a pure function of
    ``(config, two_colour, seed)`` whatever the blocks."""

    def __init__(self, config: SimulationConfig, two_colour: TwoColourConfig, seed: int = 0,
                 device: torch.device | str = "cpu") -> None:
        self.config, self.tc, self.seed = config, two_colour, int(seed)
        self.sim = MovieSimulator(config, seed, device)
        if self.sim.sensor is not None:
            raise ConfigError("two_colour: per-pixel sCMOS variation is not simulated for two channels; set "
                              "simulation.sensor_variation 0")
        self.device = self.sim.device
        self.config2 = replace(config, **two_colour.channel2) if two_colour.channel2 else config
        self.mapping = ChannelMapping.draw(config.frame_size, self.sim.camera.pixel_size, two_colour)
        gen = seeded_generator(self.seed, STREAM_BG, CHANNEL2_KEY, device=self.device)
        self.bg2 = background(self.config2, 1, gen)[0]
        s2 = self.config2.psf_sigma if "psf_sigma" in two_colour.channel2 else self.sim.sigma0
        self.sigma2 = (float(s2[0]), float(s2[1]))

    def block(self, t0: int, t1: int) -> TwoColourBlock:
        cfg, sim, tc = self.config, self.sim, self.tc
        _, rows = sim.process.rows(t0, t1)
        x0, y0 = rows.x.cpu().numpy(), rows.y.cpu().numpy()
        dye = tc.dye_of(x0, y0)  # before the drift: the molecule's own place
        drift = sim.drift_nm(t0, t1)
        frame = rows.frame.cpu().numpy()
        x, y = x0.astype(np.float64), y0.astype(np.float64)
        if drift is not None:
            x = x + drift[frame - t0, 0] / sim.camera.pixel_size
            y = y + drift[frame - t0, 1] / sim.camera.pixel_size
        x2, y2 = self.mapping(x, y)
        z = rows.z.cpu().numpy().astype(np.float64)
        ratio = tc.ratios[dye]
        photons = rows.photons.cpu().numpy().astype(np.float64)
        n = t1 - t0
        level = sim.bg_level(t0, t1)
        adu, views = [], []
        for k, (px, py, pz, share, conf, sigma0, bg) in enumerate((
                (x, y, z, 1 - ratio, cfg, sim.sigma0, sim.bg),
                (x2, y2, z + self.mapping.axial_offset, ratio, self.config2, self.sigma2, self.bg2)), 1):
            on = share > 0
            t = lambda a, on=on: torch.as_tensor(np.asarray(a)[on], device=self.device)  # noqa: E731
            expected = torch.zeros((n, *cfg.frame_size), device=self.device)
            width = rows.width[torch.as_tensor(on, device=rows.width.device)]
            render_emitters(conf, expected, t(frame - t0), t(px).float(), t(py).float(), t(pz).float(),
                            t(photons * share).float(), torch.tensor([sigma0], device=self.device).expand(
                                int(on.sum()), 2), width)
            expected += bg if level is None else bg * level[:, None, None]
            counts = torch.empty_like(expected)
            for i in range(n):
                keys = (STREAM_NOISE, t0 + i) if k == 1 else (STREAM_NOISE, t0 + i, CHANNEL2_KEY)
                counts[i] = camera_adu(expected[i], sim.camera, seeded_generator(self.seed, *keys, device=self.device))
            adu.append(counts.cpu().numpy().astype(np.uint16))
            views.append(_rows(frame, px, py, pz, photons * share, dye, bg, level, t0, cfg.frame_size, on, channel=k))
        truth = _rows(frame, x, y, z, photons, dye, sim.bg, level, t0, cfg.frame_size, np.ones(len(x), bool))
        return TwoColourBlock(t0, adu[0], adu[1], truth, views[0], views[1], drift)

    def blocks(self, n_frames: int, block: int | None = None) -> Iterator[TwoColourBlock]:
        block = default_block(self.config) if block is None else int(block)
        for t0 in range(0, n_frames, block):
            yield self.block(t0, min(n_frames, t0 + block))


def _rows(frame: np.ndarray, x: np.ndarray, y: np.ndarray, z: np.ndarray, photons: np.ndarray, dye: np.ndarray,
          bg: torch.Tensor, level: torch.Tensor | None, t0: int, size: tuple[int, int], keep: np.ndarray,
          channel: int | None = None) -> EmitterTable:
    """Truth rows inside a frame of ``size`` (and ``keep``), sorted by frame, with their background and dye."""
    h, w = size
    keep = keep & (x >= -0.5) & (x < w - 0.5) & (y >= -0.5) & (y < h - 0.5)
    order = np.nonzero(keep)[0]
    order = order[np.argsort(frame[order], kind="stable")]
    xt, yt = torch.as_tensor(x[order]), torch.as_tensor(y[order])
    b = bg_at(bg.cpu(), xt, yt).numpy().astype(np.float64)
    if level is not None:
        b = b * level.cpu().numpy()[frame[order] - t0]
    columns = {"frame": frame[order], "x": x[order], "y": y[order], "z": z[order], "photons": photons[order],
               "bg": b, "dye": dye[order] + 1.0}
    if channel is not None:
        columns["channel"] = np.full(len(order), float(channel))
    return EmitterTable(columns)


@dataclass(frozen=True)
class BeadSlide:
    """A bead slide seen by both channels: ``adu1``, ``adu2`` (T, H, W) uint16; the beads at ``x``, ``y``
    (channel-1 px) and ``x2``, ``y2`` (channel-2 px); ``z`` the depth of each frame (nm; None: one plane)."""

    adu1: np.ndarray
    adu2: np.ndarray
    x: np.ndarray
    y: np.ndarray
    x2: np.ndarray
    y2: np.ndarray
    z: np.ndarray | None
    photons: float
    ratio: float

    def truth(self, channel: int = 0) -> EmitterTable:
        """Rows per frame: channel 1's (or 0: the sample's, both channels' photons) or channel 2's view."""
        t = len(self.adu1)
        n = len(self.x)
        x, y = (self.x2, self.y2) if channel == 2 else (self.x, self.y)
        share = {0: 1.0, 1: 1 - self.ratio, 2: self.ratio}[channel]
        z = np.zeros(t) if self.z is None else np.asarray(self.z, np.float64)
        columns = {"frame": np.repeat(np.arange(t), n), "x": np.tile(x, t), "y": np.tile(y, t),
                   "z": np.repeat(z, n), "photons": np.full(t * n, self.photons * share), "bg": np.zeros(t * n)}
        if channel:
            columns["channel"] = np.full(t * n, float(channel))
        return EmitterTable(columns)


def bead_positions(config: SimulationConfig, mapping: ChannelMapping, n: int, seed: int = 0,
                   spacing: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``n`` bead positions (channel-1 px) drawn over the field, at least ``spacing`` px apart (default 12 PSF σ:
    each bead's fit window clear of the others' light) and with room for their spot in both channels' frames; a
    ConfigError when the field cannot hold them. A 3-D PSF's spot is taken 1.5 times as wide (defocused planes)."""
    rng = np.random.default_rng([int(seed), 7501])
    h, w = config.frame_size
    sigma = max(config.psf_sigma) * (1.5 if config.is_3d else 1.0)
    spacing = 12 * sigma if spacing is None else float(spacing)
    edge = math.ceil(3 * sigma) + 1
    xs: list[float] = []
    ys: list[float] = []
    for _ in range(200 * n):
        if len(xs) == n:
            break
        x, y = rng.uniform(edge, w - 1 - edge), rng.uniform(edge, h - 1 - edge)
        x2, y2 = mapping(np.array([x]), np.array([y]))
        if not (edge <= x2[0] <= w - 1 - edge and edge <= y2[0] <= h - 1 - edge):
            continue
        if xs and np.min(np.hypot(np.array(xs) - x, np.array(ys) - y)) < spacing:
            continue
        xs.append(x)
        ys.append(y)
    if len(xs) < n:
        raise ConfigError(f"beads: {n} beads {spacing:.0f} px apart do not fit a field of {h} x {w} px; give fewer")
    return np.array(xs), np.array(ys)


def bead_slide(config: SimulationConfig, two_colour: TwoColourConfig, *, n_beads: int = 30,
               positions: tuple[np.ndarray, np.ndarray] | None = None, frames: int = 5,
               z: np.ndarray | None = None, photons: float = 40000.0, ratio: float = 0.5, bg: float = 20.0,
               seed: int = 0) -> BeadSlide:
    """A bead slide (module docstring): ``frames`` frames of the beads (``z`` given: one frame per plane),
    ``photons`` per bead and frame over both channels, ``ratio`` of them in channel 2, ``bg`` photons/px."""
    if z is not None and not config.is_3d:
        raise ConfigError("beads: a z-stack needs a 3-D PSF (simulation.psf astig3d, spline or pupil)")
    if not 0 <= ratio <= 1:
        raise ConfigError(f"beads: ratio must be in [0, 1], got {ratio}")
    mapping = ChannelMapping.draw(config.frame_size, config.camera.pixel_size, two_colour)
    x, y = (bead_positions(config, mapping, n_beads, seed) if positions is None
            else (np.asarray(positions[0], np.float64), np.asarray(positions[1], np.float64)))
    x2, y2 = mapping(x, y)
    planes = np.zeros(frames) if z is None else np.asarray(z, np.float64)
    config2 = replace(config, **two_colour.channel2) if two_colour.channel2 else config
    out = []
    for k, (px, py, dz, share, conf) in enumerate(((x, y, 0.0, 1 - ratio, config),
                                                   (x2, y2, mapping.axial_offset, ratio, config2)), 1):
        t, n = len(planes), len(px)
        expected = torch.zeros((t, *config.frame_size))
        render_emitters(conf, expected, torch.arange(t).repeat_interleave(n),
                        torch.as_tensor(np.tile(px, t), dtype=torch.float32),
                        torch.as_tensor(np.tile(py, t), dtype=torch.float32),
                        torch.as_tensor(np.repeat(planes + dz, n), dtype=torch.float32),
                        torch.full((t * n,), float(photons * share)))
        gen = seeded_generator(int(seed), STREAM_NOISE, k)
        out.append(camera_adu(expected + float(bg), config.camera, gen).numpy().astype(np.uint16))
    return BeadSlide(out[0], out[1], x, y, x2, y2, None if z is None else planes, float(photons), float(ratio))


# ---- files ---------------------------------------------------------------------------------------------


def movie_paths(out: str | os.PathLike, layout: str) -> tuple[Path, ...]:
    """The movie file(s) of a two-colour simulation: ``out`` (split view) or ``<stem>_ch1``, ``<stem>_ch2``."""
    out = Path(out)
    if out.suffix.lower() not in TIFF_SUFFIXES:
        raise ConfigError(f"out: {str(out)!r}: two-colour movies are written as TIFF (.tif, .tiff)")
    if layout == TWO_FILES:
        return tuple(out.with_name(f"{out.stem}_ch{k}{out.suffix}") for k in (1, 2))
    return (out,)


def truth_paths(gt: str | os.PathLike) -> dict[str, Path]:
    """The truth files beside ``gt``: the sample's, each channel's view, the mapping (module docstring)."""
    gt = Path(gt)
    return {"truth": gt, "ch1": gt.with_name(f"{gt.stem}_ch1.csv"), "ch2": gt.with_name(f"{gt.stem}_ch2.csv"),
            "mapping": gt.with_name(f"{gt.stem}_mapping.json")}


class _Pages:
    """One uint16 TIFF series of ``shape`` written frame by frame (what ``open_stack`` memory-maps)."""

    def __init__(self, path: Path, shape: tuple[int, int, int], meta: dict[str, Any]) -> None:
        self.tif = tifffile.TiffWriter(path, bigtiff=int(np.prod(shape)) * 2 > BIGTIFF_BYTES)
        self.meta = {"axes": "TYX", **meta}

    def write(self, frames: np.ndarray) -> None:
        for frame in frames:
            self.tif.write(frame, contiguous=True, photometric="minisblack", metadata=self.meta)

    def close(self) -> None:
        self.tif.close()


@dataclass(frozen=True)
class TwoColourResult:
    """What a two-colour simulation wrote: the movie file(s) and their frame shape (T, H, W) each, the truth
    files (``truth_paths``) and rows in the sample's truth."""

    movies: tuple[Path, ...]
    shape: tuple[int, int, int]
    truth: dict[str, Path]
    n_localizations: int
    mapping: ChannelMapping
    drift: Path | None = None


def _file_shape(layout: str, t: int, frame: tuple[int, int]) -> tuple[int, int, int]:
    h, w = frame
    if layout in ("left-right", "right-left"):
        return (t, h, 2 * w)
    if layout in ("top-bottom", "bottom-top"):
        return (t, 2 * h, w)
    return (t, h, w)


def _write_movies(layout: str, paths: tuple[Path, ...], shape: tuple[int, int, int], meta: dict[str, Any],
                  blocks: Iterator[tuple[np.ndarray, np.ndarray]]) -> None:
    """Each block's channel frames into the movie file(s), atomically."""
    with ExitStack() as stack:
        tmps = [stack.enter_context(atomic_output(p)) for p in paths]
        file_shape = _file_shape(layout, shape[0], shape[1:])
        writers = [_Pages(tmp, file_shape, {**meta, "channel": k + 1} if len(paths) == 2 else meta)
                   for k, tmp in enumerate(tmps)]
        try:
            for a1, a2 in blocks:
                if len(writers) == 2:
                    writers[0].write(a1)
                    writers[1].write(a2)
                    continue
                frames = np.zeros((len(a1), *file_shape[1:]), np.uint16)
                r1, r2 = preset_regions(layout, file_shape[1:])
                frames[:, r1.y0:r1.y1, r1.x0:r1.x1] = a1
                frames[:, r2.y0:r2.y1, r2.x0:r2.x1] = a2
                writers[0].write(frames)
        finally:
            for w in writers:
                w.close()


def simulate_two_colour(config: SimulationConfig, two_colour: TwoColourConfig, n_frames: int,
                        out: str | os.PathLike, gt: str | os.PathLike | None = None, *, seed: int = 0,
                        block: int | None = None, device: torch.device | str = "cpu",
                        progress: Callable[[int], object] | None = None) -> TwoColourResult:
    """Simulate a two-colour movie of ``n_frames`` channel frames of ``config.frame_size`` into ``out`` (module
    docstring: one split-view TIFF, or two files) and its truth beside ``gt``; memory: one block of frames."""
    n_frames = int(n_frames)
    if n_frames < 1:
        raise ConfigError(f"frames must be >= 1, got {n_frames}")
    paths = movie_paths(out, two_colour.layout)
    truth = truth_paths(gt) if gt is not None else {}
    if any(p.resolve() == t.resolve() for p in paths for t in truth.values()):
        raise ConfigError("gt and out must be different files")
    sim = TwoColourSimulator(config, two_colour, seed, resolve_device(device))
    meta = {"decode_mem_simulation": config.to_dict(), "two_colour": two_colour.to_dict(), "seed": int(seed)}
    n_rows = 0
    drift_out = drift_path(gt) if gt is not None and sim.sim.drift is not None else None
    pixel = sim.sim.camera.pixel_size
    three_d = config.is_3d
    with ExitStack() as stack:
        writers = ({k: stack.enter_context(ThunderstormWriter(truth[k], pixel, ("dye",) if k == "truth"
                                                              else ("dye", "channel"), three_d))
                    for k in ("truth", "ch1", "ch2")} if gt is not None else {})
        drifts = stack.enter_context(DriftWriter(drift_out)) if drift_out is not None else None

        def blocks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            nonlocal n_rows
            for blk in sim.blocks(n_frames, block):
                if writers:
                    writers["truth"].write(blk.truth)
                    writers["ch1"].write(blk.view1)
                    writers["ch2"].write(blk.view2)
                if drifts is not None:
                    drifts.write(np.arange(blk.t0, blk.t0 + len(blk.adu1)), blk.drift)
                n_rows += len(blk.truth)
                yield blk.adu1, blk.adu2
                if progress is not None:
                    progress(len(blk.adu1))

        _write_movies(two_colour.layout, paths, (n_frames, *config.frame_size), meta, blocks())
        if gt is not None:
            with atomic_output(truth["mapping"]) as tmp:
                tmp.write_text(json.dumps(sim.mapping.to_dict(), indent=1) + "\n")
    return TwoColourResult(paths, (n_frames, *config.frame_size), truth, n_rows, sim.mapping, drift_out)


def simulate_bead_slide(config: SimulationConfig, two_colour: TwoColourConfig, out: str | os.PathLike,
                        gt: str | os.PathLike | None = None, **beads: Any) -> TwoColourResult:
    """``bead_slide(config, two_colour, **beads)`` written as a two-colour movie (module docstring) with the
    beads' truth (per frame) beside ``gt``."""
    slide = bead_slide(config, two_colour, **beads)
    paths = movie_paths(out, two_colour.layout)
    truth = truth_paths(gt) if gt is not None else {}
    meta = {"decode_mem_simulation": config.to_dict(), "two_colour": two_colour.to_dict(), "beads": len(slide.x),
            "seed": int(beads.get("seed", 0))}
    t = len(slide.adu1)
    _write_movies(two_colour.layout, paths, (t, *config.frame_size), meta, iter([(slide.adu1, slide.adu2)]))
    mapping = ChannelMapping.draw(config.frame_size, config.camera.pixel_size, two_colour)
    if gt is not None:
        pixel = config.camera.pixel_size
        for key, channel in (("truth", 0), ("ch1", 1), ("ch2", 2)):
            extras = ("channel",) if channel else ()
            with ThunderstormWriter(truth[key], pixel, extras, slide.z is not None) as writer:
                writer.write(slide.truth(channel))
        with atomic_output(truth["mapping"]) as tmp:
            tmp.write_text(json.dumps(mapping.to_dict(), indent=1) + "\n")
    return TwoColourResult(paths, (t, *config.frame_size), truth, t * len(slide.x), mapping)
