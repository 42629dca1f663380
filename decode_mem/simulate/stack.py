"""Big synthetic stacks on disk: TIFF or zarr v3, written block by block with bounded memory, atomically.

Memory holds one block of frames (plus the emitters on at that time), never the stack: the TIFF grows by
contiguous pages (``tifffile.TiffWriter``, BigTIFF above ~3.9 GB), the zarr array by chunks of
``(block, H, W)``, the ground truth by rows (``ThunderstormWriter``). Every output is written under a
``.partial`` name and renamed only when complete; on any error (or Ctrl-C) the partial files are removed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tifffile
import torch
import yaml

from decode_mem.config import resolve_device
from decode_mem.errors import ConfigError
from decode_mem.io.atomic import atomic_output
from decode_mem.io.drift import DriftWriter, drift_path
from decode_mem.io.thunderstorm import ThunderstormWriter
from decode_mem.simulate.config import SimulationConfig
from decode_mem.simulate.movie import MovieSimulator, default_block

BIGTIFF_BYTES = 3_900_000_000
TIFF_SUFFIXES = (".tif", ".tiff")
ZARR_SUFFIXES = (".zarr",)


@dataclass(frozen=True)
class StackResult:
    """What ``simulate_stack`` wrote: the stack (T, H, W) uint16, the ground-truth rows and, when asked for,
    the camera YAML (with the sCMOS maps beside it) and the true stage drift (``<gt stem>_drift.csv``)."""

    out: Path
    gt: Path | None
    shape: tuple[int, int, int]
    n_localizations: int
    block: int
    camera: Path | None = None
    drift: Path | None = None


def stack_format(path: str | os.PathLike) -> str:
    """'tiff' or 'zarr' from the file name; anything else is a ConfigError."""
    suffix = Path(path).suffix.lower()
    if suffix in TIFF_SUFFIXES:
        return "tiff"
    if suffix in ZARR_SUFFIXES:
        return "zarr"
    raise ConfigError(f"out: {str(path)!r} must end in .tif, .tiff or .zarr")


def simulate_stack(config: SimulationConfig, n_frames: int, out: str | os.PathLike,
                   gt: str | os.PathLike | None = None, *, seed: int = 0, block: int | None = None,
                   device: torch.device | str = "cpu", camera_out: str | os.PathLike | None = None,
                   progress: Callable[[int], object] | None = None) -> StackResult:
    """Simulate ``n_frames`` frames and write them to ``out`` (.tif/.tiff/.zarr) and ``gt`` (ThunderSTORM CSV).

    The result depends only on ``(config, seed, n_frames)`` (``block`` sets memory and speed), see
    ``decode_mem.simulate.movie``. Frames are uint16 camera counts; the ground truth lists every emitter
    whose centre is inside the frame, once per frame it is on, with the photons it emitted in that frame
    (ThunderSTORM schema: 1-based frames, nm, ``offset`` = background photons/px at the emitter).
    A movie with stage drift (``config.drift_nm``) and a ``gt`` also gets the true drift per frame in
    ``<gt stem>_drift.csv`` (``decode_mem.io.drift``; the ground-truth positions include the drift).
    ``progress(n)`` is called after each block with the number of frames just written (e.g. ``tqdm.update``).
    ``camera_out``: write the movie's camera as a YAML that ``infer --camera`` reads; an sCMOS movie with
    per-pixel variation gets its maps beside it (``<name>_offset.npy``, ``_e_per_adu.npy``, ``_variance.npy``).
    """
    n_frames = int(n_frames)
    if n_frames < 1:
        raise ConfigError(f"frames must be >= 1, got {n_frames}")
    if int(seed) < 0:
        raise ConfigError(f"seed must be >= 0, got {seed}")
    block = default_block(config) if block is None else int(block)
    if block < 1:
        raise ConfigError(f"block must be >= 1 frame, got {block}")
    block = min(block, n_frames)
    fmt = stack_format(out)
    if gt is not None and Path(gt).resolve() == Path(out).resolve():
        raise ConfigError("gt and out must be different files")
    device = resolve_device(device)
    h, w = config.frame_size
    shape = (n_frames, h, w)
    sim = MovieSimulator(config, seed, device)
    meta = {"decode_mem_simulation": config.to_dict(), "seed": int(seed)}
    n_rows = 0
    gt_writer: Any = (ThunderstormWriter(gt, config.camera.pixel_size, three_d=config.psf != "gauss2d")
                      if gt is not None
                      else contextlib.nullcontext())
    drift_out = drift_path(gt) if gt is not None and sim.drift is not None else None
    drift_writer: Any = DriftWriter(drift_out) if drift_out is not None else contextlib.nullcontext()
    with atomic_output(out) as tmp, gt_writer as writer, drift_writer as drifts:

        def blocks() -> Iterator[tuple[int, np.ndarray]]:
            nonlocal n_rows
            for blk in sim.blocks(n_frames, block):
                if writer is not None:
                    writer.write(blk.gt)
                if drifts is not None:
                    drifts.write(np.arange(blk.t0, blk.t0 + len(blk.adu)), blk.drift)
                n_rows += len(blk.gt)
                yield blk.t0, blk.adu_uint16
                if progress is not None:
                    progress(len(blk.adu))

        if fmt == "tiff":
            _write_tiff(tmp, shape, blocks(), meta)
        else:
            _write_zarr(tmp, shape, block, blocks(), meta)
    camera_path = None if camera_out is None else write_camera(sim, camera_out)
    return StackResult(Path(out), None if gt is None else Path(gt), shape, n_rows, block, camera_path, drift_out)


def write_camera(sim: MovieSimulator, path: str | os.PathLike) -> Path:
    """The movie's camera as YAML (``section camera``), its sCMOS maps as ``.npy`` files named in it."""
    path = Path(path)
    camera = sim.camera.to_dict()
    if sim.sensor is not None:
        maps = {"offset_map": ("offset", sim.sensor.baseline),
                "e_per_adu_map": ("e_per_adu", sim.sensor.e_per_adu),
                # read noise (e-) -> variance in ADU²
                "variance_map": ("variance", (sim.sensor.read_noise / sim.sensor.e_per_adu) ** 2)}
        for key, (name, values) in maps.items():
            map_path = path.with_name(f"{path.stem}_{name}.npy")
            with atomic_output(map_path) as tmp, open(tmp, "wb") as fh:
                np.save(fh, values.cpu().numpy().astype(np.float32))
            camera[key] = map_path.name  # relative to the YAML
    with atomic_output(path) as tmp:
        tmp.write_text(yaml.safe_dump({"camera": camera}, sort_keys=False))
    return path


def _write_tiff(path: Path, shape: tuple[int, int, int], blocks: Iterator[tuple[int, np.ndarray]],
                meta: dict[str, Any]) -> None:
    """One uncompressed series of T pages, streamed page by page (``tifffile.memmap`` can map it)."""
    bigtiff = int(np.prod(shape)) * 2 > BIGTIFF_BYTES
    pages = (frame for _, frames in blocks for frame in frames)
    with tifffile.TiffWriter(path, bigtiff=bigtiff) as tif:
        tif.write(pages, shape=shape, dtype=np.uint16, photometric="minisblack", metadata={"axes": "TYX", **meta})


def _write_zarr(path: Path, shape: tuple[int, int, int], block: int, blocks: Iterator[tuple[int, np.ndarray]],
                meta: dict[str, Any]) -> None:
    """A zarr v3 array with chunks of (block, H, W), so each block fills whole chunks."""
    import zarr

    array = zarr.create_array(store=str(path), shape=shape, chunks=(block, *shape[1:]), dtype="uint16",
                              fill_value=0, zarr_format=3, attributes=meta, dimension_names=("t", "y", "x"))
    for t0, frames in blocks:
        array[t0:t0 + len(frames)] = frames
