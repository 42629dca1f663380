"""Mutation fuzzing of every reader decode_mem has: real seed files, seeded mutations, each case in a child process
with a memory limit and a time limit, and its outcome classified (``tests/io/test_fuzz_readers.py`` runs a few
hundred cases, ``benchmarks/bench_fuzz.py`` ten thousand and more).

A reader is one entry of ``READERS``: a name, the seed inputs it starts from (``seeds``: written into a folder by
decode_mem's own writers, tifffile, zarr, the vendors' libraries, or copied from the real samples in
``tests/data/vendor``), how decode_mem reads such an input whole (``read``: what a run does with it, plus the checks
a read must pass), and the mutations that apply to it. A new reader is one more entry.

A case is ``(reader, seed, number)``: the number seeds a generator that draws 1 to 3 mutations (each with a seed of
its own, so that a case can be rebuilt with fewer of them: ``minimize``). Mutations are of the kind files from
elsewhere carry: bytes flipped in a header, a file cut short, a number in a header (a TIFF tag, an integer field of
a binary header, a number written as text in an XML, JSON or text header) set to 0, 1, -1 or huge, zarr metadata
JSON edited, a chunk or a frame file deleted, CSV cells and headers edited, YAML values edited, HDF5 attributes and
datasets of a PSF or Picasso file edited, a checkpoint's metadata edited.

Outcomes. ``read``: the input was read whole and passed the read's checks; ``error``: one ``DecodeMemError`` whose
message is one line naming the file. Everything else is a defect: ``unnamed`` (a decode_mem error that does not name
the file or is not one line), ``unclean`` (another exception type), ``bad read`` (a read whose result breaks a
check: non-finite pixels, repairs over the damage budget, non-finite or out-of-range localizations, a nonsense
metadata value), ``hang`` (past the time limit), ``crash`` (a signal), ``oom`` (past the memory limit).

The children are forked from fork servers (``serve``: one per job) that have imported decode_mem and the readers'
libraries once, so a case costs a fork, not an interpreter start; a server itself never reads a case's file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ROOT / "tests" / "data" / "vendor"
FUZZ_DATA = ROOT / "tests" / "data" / "fuzz"
OUTCOMES = ("read", "error", "unnamed", "unclean", "bad read", "hang", "crash", "oom", "harness")
CLEAN = ("read", "error")
TIME_LIMIT_S = 10.0  # a case past this is a hang (the slowest clean case on a busy 2-core machine: ~1 s)
MEMORY_MIB = 1024  # address space a case may add to the forkserver's (the seeds are a few hundred KB)
MAX_COORD_PX = 2**24  # a localization beyond this (table pixels) is corrupt: float32 holds no position to the pixel
MAX_FRAME = 2**31 - 1
PRELOAD = ["numpy", "tifffile", "zarr", "h5py", "yaml", "pyarrow.csv", "pyarrow.parquet", "torch", "scipy.io",
           "decode_mem.io.stack", "decode_mem.io._tiff", "decode_mem.io._zarr", "decode_mem.io._folder",
           "decode_mem.io.localizations", "decode_mem.io.picasso", "decode_mem.io.parquet", "decode_mem.io.camera",
           "decode_mem.io.psf_file", "decode_mem.model.checkpoint", "decode_mem.pipeline.config",
           "decode_mem.io.smap", "decode_mem.io.smlm", "decode_mem.io.decode_h5", "decode_mem.io.rapidstorm"]
VENDOR_LIBRARIES = {"nd2": "nd2", "czi": "pylibCZIrw.czi", "lif": "readlif.reader", "sif": "sif_parser",
                    "ndtiff": "ndtiff"}


class BadRead(AssertionError):
    """A read finished but its result breaks a check (the ``bad read`` outcome)."""


# ------------------------------------------------------------------------------------------------ seed inputs

def movie(n: int = 40, h: int = 16, w: int = 16, dtype: str = "uint16", seed: int = 0) -> np.ndarray:
    """A small SMLM-like movie: a baseline, noise and a few bright spots."""
    rng = np.random.default_rng(seed)
    frames = 100 + rng.poisson(20, (n, h, w)).astype(np.float64)
    yy, xx = np.mgrid[:h, :w]
    for t in range(n):
        for _ in range(2):
            y, x = rng.uniform(2, h - 2), rng.uniform(2, w - 2)
            frames[t] += 400 * np.exp(-((yy - y) ** 2 + (xx - x) ** 2) / 2.0)
    return frames.astype(dtype)


def _tiff_seeds(folder: Path, flavour: str) -> list[Path]:
    import tifffile

    frames = movie()
    path = folder / f"{flavour}.tif"
    if flavour == "contiguous":
        tifffile.imwrite(path, frames)
    elif flavour == "compressed":
        tifffile.imwrite(path, frames, compression="zlib")
    elif flavour == "tiled":
        tifffile.imwrite(path, frames, tile=(16, 16))
    elif flavour == "ome":
        tifffile.imwrite(path, frames, ome=True, metadata={"axes": "TYX", "PhysicalSizeX": 0.1})
    elif flavour == "pages":
        for f in frames:
            tifffile.imwrite(path, f, append=True)
    elif flavour == "bigtiff":
        tifffile.imwrite(path, frames, bigtiff=True)
    elif flavour == "imagej":
        hyper = movie(40).reshape(20, 2, 16, 16)  # T, C
        tifffile.imwrite(path, hyper, imagej=True, metadata={"axes": "TCYX"})
    return [path]


def _zarr_seeds(folder: Path, flavour: str) -> list[Path]:
    import zarr

    frames = movie()
    path = folder / f"{flavour}.zarr"
    if flavour == "v2":
        a = zarr.create_array(str(path), shape=frames.shape, chunks=(2, 8, 16), dtype=frames.dtype, zarr_format=2)
        a[:] = frames
    elif flavour == "v3":
        a = zarr.create_array(str(path), shape=frames.shape, chunks=(2, 16, 8), dtype=frames.dtype, zarr_format=3,
                              dimension_names=["t", "y", "x"])
        a[:] = frames
    elif flavour == "sharded":
        a = zarr.create_array(str(path), shape=frames.shape, chunks=(1, 8, 8), shards=(2, 16, 16),
                              dtype=frames.dtype, zarr_format=3)
        a[:] = frames
    elif flavour == "ome":
        g = zarr.open_group(str(path), mode="w", zarr_format=2)
        a = g.create_array("0", shape=frames.shape, chunks=(2, 16, 16), dtype=frames.dtype)
        a[:] = frames
        g.attrs["multiscales"] = [{"version": "0.4", "axes": [{"name": "t", "type": "time"},
                                                              {"name": "y", "type": "space"},
                                                              {"name": "x", "type": "space"}],
                                   "datasets": [{"path": "0", "coordinateTransformations": [
                                       {"type": "scale", "scale": [1.0, 0.1, 0.1]}]}]}]
    return [path]


def _folder_seeds(folder: Path) -> list[Path]:
    import tifffile

    frames = movie()
    path = folder / "frames"
    path.mkdir()
    for t, f in enumerate(frames):
        tifffile.imwrite(path / f"frame_{t:03d}.tif", f)
    mixed = folder / "npy_frames"
    mixed.mkdir()
    for t in range(0, len(frames), 2):
        np.save(mixed / f"part{t // 2:02d}.npy", frames[t:t + 2])
    return [path, mixed]


def _npy_seeds(folder: Path) -> list[Path]:
    np.save(folder / "movie.npy", movie())
    np.save(folder / "float.npy", movie(dtype="float32"))
    return [folder / "movie.npy", folder / "float.npy"]


def _copy(source: Path, folder: Path) -> Path:
    target = folder / source.name
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copy(source, target)
    return target


def _vendor_seeds(folder: Path, key: str) -> list[Path]:
    if key == "sif":
        return [_copy(VENDOR / "sif" / "test_multiframe.sif", folder), _copy(VENDOR / "sif" / "issue27_test.sif",
                                                                             folder)]
    if key == "nd2":
        return [_copy(VENDOR / "nd2" / "example-timelapse.nd2", folder)]
    if key == "lif":
        return [_copy(VENDOR / "lif" / "LeicaLASX_wavelength-sweep_example.lif", folder)]
    if key == "czi":
        from vendor_files import write_czi

        written = folder / "written.czi"
        write_czi(written, movie(40, 16, 16))
        return [_copy(VENDOR / "czi" / "LLS7_small.czi", folder), written]
    if key == "ndtiff":
        from vendor_files import write_ndtiff

        (folder / "written").mkdir()
        written = write_ndtiff(folder / "written", movie(40, 16, 16))
        return [_copy(VENDOR / "ndtiff" / "ndtiff3.2_11bit_1", folder),
                _copy(VENDOR / "ndtiff" / "12_bit_pycromanager_mda", folder), written]
    raise KeyError(key)


def _table() -> Any:
    from decode_mem.io.table import EmitterTable

    rng = np.random.default_rng(3)
    n = 60
    return EmitterTable.from_arrays(frame=rng.integers(0, 20, n), x=rng.uniform(0, 31, n), y=rng.uniform(0, 31, n),
                                    z=rng.uniform(-300, 300, n), photons=rng.uniform(500, 5000, n),
                                    bg=rng.uniform(10, 100, n), prob=rng.uniform(0.5, 1, n),
                                    sigma_x=rng.uniform(0.05, 0.3, n), sigma_y=rng.uniform(0.05, 0.3, n))


TABLES = ROOT / "tests" / "data" / "tables"  # other tools' real tables (Locan's test data, BSD-3)


def _table_seeds(folder: Path, fmt: str) -> list[Path]:
    """A table written by decode_mem's own writer for the format, and the real file of another tool where there is
    one (rapidSTORM: read only, the real file alone)."""
    from decode_mem.io.localizations import write_localizations

    table = _table()
    if fmt == "csv":
        two_d = folder / "locs2d.csv"
        write_localizations(table, two_d, pixel_size=100.0, three_d=False)
        three_d = folder / "locs.csv"
        write_localizations(table, three_d, pixel_size=100.0)
        return [three_d, two_d, _copy(TABLES / "thunderstorm" / "Thunderstorm_dstorm_data.csv", folder)]
    if fmt == "rapidstorm":
        return [_copy(TABLES / "rapidstorm" / "rapidSTORM_dstorm_data.txt", folder)]
    if fmt == "smap_v7":  # SMAP's MATLAB v7 (v5 format) files, as scipy writes them: decode_mem reads, never writes
        from scipy.io import savemat

        loc = {"frame": table["frame"].astype(float) + 1, "xnm": (table["x"] + 1.0) * 100.0,
               "ynm": (table["y"] + 1.0) * 100.0, "phot": table["photons"].astype(float),
               "bg": table["bg"].astype(float), "locprecnm": table["sigma_x"] * 100.0}
        path = folder / "v7_sml.mat"
        savemat(path, {"saveloc": {"loc": loc, "file": {"info": {"cam_pixelsize_um": [0.1, 0.1], "Width": 32,
                                                                 "Height": 32}}}})
        return [path]
    suffix = {"picasso": ".hdf5", "parquet": ".parquet", "smap": "_sml.mat", "smlm": ".smlm", "decode": ".h5"}[fmt]
    path = folder / f"locs{suffix}"
    write_localizations(table, path, pixel_size=100.0, width=32, height=32, frames=20,
                        **({"fmt": "decode"} if fmt == "decode" else {}))
    if fmt == "picasso":  # its /locs is chunked for 16 384 rows (786 KB for these 60): the same data, contiguous
        _repack(path)
    real = {"smlm": TABLES / "smlm" / "SMLM_dstorm_data.smlm", "decode": TABLES / "decode" / "decode_dstorm_data.h5"}
    return [path] + ([_copy(real[fmt], folder)] if fmt in real else [])


def _repack(path: Path) -> None:
    """An HDF5 file rewritten with its datasets contiguous (small enough for a regression input)."""
    import h5py

    with h5py.File(path, "r") as f:
        data = {k: f[k][()] for k in f}
        attrs = dict(f.attrs)
    with h5py.File(path, "w") as f:
        for k, v in data.items():
            f.create_dataset(k, data=v)
        f.attrs.update(attrs)


def _camera_seeds(folder: Path) -> list[Path]:
    import yaml

    plain = folder / "camera.yaml"
    plain.write_text(yaml.safe_dump({"camera": {"kind": "emccd", "baseline": 100.0, "e_per_adu": 45.0,
                                                "em_gain": 300.0, "qe": 0.9, "read_noise": 74.4,
                                                "pixel_size": 117.0}}))
    maps = folder / "scmos"
    maps.mkdir()
    rng = np.random.default_rng(1)
    np.save(maps / "offset.npy", 100 + rng.normal(0, 2, (16, 16)))
    np.save(maps / "gain.npy", 0.5 + rng.uniform(0, 0.05, (16, 16)))
    np.save(maps / "variance.npy", 2 + rng.uniform(0, 1, (16, 16)))
    with_maps = maps / "camera.yaml"
    with_maps.write_text(yaml.safe_dump({"kind": "scmos", "pixel_size": 108.0, "qe": 0.8, "em_gain": 1.0,
                                         "offset_map": "offset.npy", "e_per_adu_map": "gain.npy",
                                         "variance_map": "variance.npy"}))
    return [plain, with_maps]


def _pipeline_seeds(folder: Path) -> list[Path]:
    return [_copy(p, folder) for p in sorted((ROOT / "pipelines").glob("*.yaml"))[:3]]


def _psf_seeds(folder: Path) -> list[Path]:
    from decode_mem.io.psf_file import write_psf
    from decode_mem.simulate.spline_fit import spline_from_volume

    z = np.arange(-200.0, 201.0, 100.0)
    yy, xx = np.mgrid[-3:4, -3:4]
    sigma = 1.0 + (z / 400.0) ** 2
    volume = np.exp(-(yy[None] ** 2 + xx[None] ** 2) / (2 * sigma[:, None, None] ** 2))
    volume /= volume.sum(axis=(1, 2), keepdims=True)
    spline = spline_from_volume(volume, dz=100.0, z0=2.0, z_range=(-150.0, 150.0), pixel_size=100.0)
    path = folder / "psf.h5"
    write_psf(path, spline)
    return [path]


def _checkpoint_seeds(folder: Path) -> list[Path]:
    """The shipped model, and a tiny network saved by ``save_checkpoint`` with the shipped model's metadata (a few
    KB: small enough for a regression input)."""
    import torch

    from decode_mem.io.camera import Camera
    from decode_mem.model.checkpoint import save_checkpoint
    from decode_mem.model.net import DecodeNet, ModelConfig

    shipped = _copy(ROOT / "data" / "models" / "default_2d.pt", folder)
    meta = torch.load(shipped, weights_only=True)["meta"]
    torch.manual_seed(0)
    net = DecodeNet(ModelConfig(depth=1, features=2, inter_features=2))
    tiny = save_checkpoint(folder / "tiny.pt", net=net, camera=Camera.from_dict(meta["camera"]),
                           simulation=meta["simulation"], step=1)
    return [shipped, tiny]


# ------------------------------------------------------------------------------------------------ reads

def _stack_budget() -> float:
    """The share of a stack's frames repairs may cover (``io.damage``'s setting; 0.05 where there is none yet)."""
    from decode_mem.io import damage

    return float(getattr(damage, "MAX_DAMAGED_SHARE", 0.05))


def read_stack(path: Path, **options: Any) -> dict[str, Any]:
    """What a run does with a movie: open it, describe it, its metadata, every frame in blocks with context;
    a read must give finite pixels and repair no more than the damage budget allows."""
    from decode_mem.io import open_stack

    with open_stack(path, **options) as stack:
        stack.describe()
        stack.metadata  # noqa: B018 (read for its side effects: the file's camera)
        n, frames = len(stack), 0
        for _, block in stack.blocks(16, context=1):
            frames += len(block) - 2
            if block.dtype.kind == "f" and not np.isfinite(block).all():
                raise BadRead("non-finite pixels after repair")
        notes = stack.notes()
        records = stack.damage.records
    if frames != n:
        raise BadRead(f"blocks gave {frames} frames of {n}")
    repaired = {d.frame for d in records  # repaired frames (not the first frame a cut file leaves out)
                if getattr(d, "repaired", d.frame < n and "left out" not in d.action)}
    if len(repaired) > _stack_budget() * n:
        raise BadRead(f"{len(repaired)} of {n} frames repaired, more than the damage budget")
    return {"frames": n, "repaired": len(repaired), "notes": len(notes)}


def read_table(path: Path) -> dict[str, Any]:
    """What linking, drift and rendering get: every row of the file, in pixels of 100 nm; no row may carry a
    non-finite or out-of-range frame, coordinate or photon count, and the file's metadata must be sane."""
    from decode_mem.io.localizations import iter_localizations, localization_meta

    meta = localization_meta(path)
    for name, value in (("pixel_size", meta.pixel_size), ("width", meta.width), ("height", meta.height),
                        ("frames", meta.frames)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise BadRead(f"localization_meta {name} = {value!r}")
    rows = 0
    for table in iter_localizations(path, pixel_size=100.0, chunk_rows=25):
        rows += len(table)
        f = table["frame"]
        if len(f) and (f.min() < 0 or f.max() > MAX_FRAME or (meta.frames is not None and f.max() >= meta.frames)):
            raise BadRead(f"frames {f.min()}..{f.max()} (recorded frames: {meta.frames})")
        for name in ("x", "y", "z", "photons", "bg"):
            if not np.isfinite(table[name]).all():
                raise BadRead(f"non-finite {name}")
        pixel = meta.pixel_size / 100.0 if meta.pixel_size else None  # the camera pixel in the tables' pixels
        for name, size in (("x", meta.width), ("y", meta.height)):  # the image and its own size around it
            v = table[name]
            low = -0.5 - size * pixel if size and pixel else -MAX_COORD_PX
            high = 2 * size * pixel - 0.5 if size and pixel else MAX_COORD_PX
            if len(v) and (v.min() < low or v.max() > high):
                raise BadRead(f"{name} {v.min()}..{v.max()} outside the image ({size} px of {meta.pixel_size} nm)")
        if len(table) and table["photons"].min() < 0:
            raise BadRead("negative photons")
    return {"rows": rows}


def read_camera(path: Path) -> dict[str, Any]:
    """A camera YAML as ``--camera`` reads it, its maps loaded for 16 x 16 frames."""
    from decode_mem.io.camera import Camera, camera_fields, with_fields

    camera = with_fields(Camera(), camera_fields(path))
    if camera.has_maps:
        camera.load_maps((16, 16))
    return {"kind": camera.kind}


def read_pipeline(path: Path) -> dict[str, Any]:
    from decode_mem.pipeline.config import load_pipeline

    load_pipeline(path)
    return {}


def read_psf_file(path: Path) -> dict[str, Any]:
    """A PSF file as training and the simulator read it: the header, the spline; its numbers finite."""
    from decode_mem.io.psf_file import psf_header, read_psf

    psf_header(path)
    data = read_psf(path)
    for name in ("x0", "y0", "z0", "dz", "pixel_size"):
        if not math.isfinite(getattr(data, name)):
            raise BadRead(f"PSF {name} = {getattr(data, name)!r}")
    if not all(math.isfinite(v) for v in data.z_range):
        raise BadRead(f"PSF z_range = {data.z_range!r}")
    return {"shape": data.shape}


def read_checkpoint(path: Path) -> dict[str, Any]:
    from decode_mem.model.checkpoint import load_model

    model = load_model(path)
    return {"receptive_field": model.receptive_field}


# ------------------------------------------------------------------------------------------------ mutations

SPECIAL_INTS = (0, 1, -1, 2, 255, 65535, 2**31 - 1, 2**32 - 1, 2**63 - 1, 10**6, 10**9, 10**12)


def _files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]


def _pick_file(path: Path, rng: np.random.Generator, prefer: Callable[[Path], bool] | None = None) -> Path:
    files = _files(path)
    if prefer is not None and rng.random() < 0.6:
        preferred = [f for f in files if prefer(f)]
        files = preferred or files
    return files[int(rng.integers(len(files)))]


def _is_meta(p: Path) -> bool:
    return p.name in (".zarray", ".zattrs", ".zgroup", "zarr.json", "NDTiff.index") or p.suffix in (".json", ".yaml",
                                                                                                  ".txt")


def _tiff_entries(data: bytes) -> list[tuple[int, int, int, int, int, str]]:
    """The IFD entries of a TIFF (classic or BigTIFF): (entry offset, tag, type, count, value offset, byte order),
    following at most 64 IFDs; [] where the bytes are no TIFF."""
    if data[:2] not in (b"II", b"MM"):
        return []
    bo = "<" if data[:2] == b"II" else ">"
    try:
        magic = struct.unpack_from(bo + "H", data, 2)[0]
        big = magic == 43
        pos = struct.unpack_from(bo + ("Q" if big else "I"), data, 8 if big else 4)[0]
        out = []
        for _ in range(64):
            if pos <= 0 or pos + 8 > len(data):
                break
            n = struct.unpack_from(bo + ("Q" if big else "H"), data, pos)[0]
            size, start = (20, pos + 8) if big else (12, pos + 2)
            if n > 4096 or start + n * size > len(data):
                break
            for i in range(n):
                at = start + i * size
                tag, typ = struct.unpack_from(bo + "HH", data, at)
                count = struct.unpack_from(bo + ("Q" if big else "I"), data, at + 4)[0]
                out.append((at, tag, typ, count, at + (12 if big else 8), bo))
            pos = struct.unpack_from(bo + ("Q" if big else "I"), data, start + n * size)[0]
        return out
    except struct.error:
        return out if "out" in locals() else []


def _regions(data: bytes, path: Path) -> list[tuple[int, int]]:
    """Where a binary file's header numbers are: its first and last 4 KiB, the IFDs of a TIFF, a CZI's
    directory."""
    size = len(data)
    regions = [(0, min(size, 4096)), (max(0, size - 4096), size)]
    for at, *_ in _tiff_entries(data)[:256]:
        regions.append((at, min(size, at + 20)))
    if data.startswith(b"ZISRAWFILE") and size >= 100:
        directory = struct.unpack_from("<q", data, 84)[0]  # ZISRAWFILE: the directory's position
        if 0 < directory < size:
            regions.append((directory, min(size, directory + 8192)))
    return [r for r in regions if r[1] > r[0]]


def _in_regions(data: bytes, path: Path, rng: np.random.Generator, width: int = 1) -> int:
    regions = _regions(data, path)
    lo, hi = regions[int(rng.integers(len(regions)))]
    return int(rng.integers(lo, max(lo + 1, hi - width + 1)))


def mutate_flip(path: Path, rng: np.random.Generator) -> str:
    target = _pick_file(path, rng, _is_meta)
    data = bytearray(target.read_bytes())
    if not data:
        return f"{target.name}: empty, nothing flipped"
    flips = []
    for _ in range(int(rng.integers(1, 9))):
        at = _in_regions(bytes(data), target, rng)
        data[at] ^= int(rng.integers(1, 256))
        flips.append(at)
    target.write_bytes(bytes(data))
    return f"{target.name}: bytes flipped at {flips}"


def mutate_truncate(path: Path, rng: np.random.Generator) -> str:
    target = _pick_file(path, rng)
    size = target.stat().st_size
    cut = int(rng.integers(0, size)) if rng.random() < 0.5 or size < 64 else int(rng.integers(size - size // 8,
                                                                                             size))
    with open(target, "r+b") as fh:
        fh.truncate(cut)
    return f"{target.name}: cut at byte {cut} of {size}"


def mutate_int(path: Path, rng: np.random.Generator) -> str:
    target = _pick_file(path, rng, lambda p: p.name == "NDTiff.index" or p.suffix in (".tif", ".nd2", ".czi",
                                                                                      ".lif", ".npy"))
    data = bytearray(target.read_bytes())
    width = int(rng.choice([1, 2, 4, 8]))
    if len(data) < width:
        return f"{target.name}: too short for a number"
    at = _in_regions(bytes(data), target, rng, width)
    at = min(at, len(data) - width)
    value = int(rng.choice(SPECIAL_INTS)) if rng.random() < 0.8 else int(rng.integers(0, 2**31))
    order = ">" if data[:2] == b"MM" else "<"
    raw = (value % 2**(8 * width)).to_bytes(width, "big" if order == ">" else "little")
    data[at:at + width] = raw
    target.write_bytes(bytes(data))
    return f"{target.name}: {width}-byte number {value} at byte {at}"


def _digit_runs(data: bytes, limit: int) -> list[tuple[int, int, int]]:
    """(start, end, step) of runs of ASCII digits, and of UTF-16LE digits (step 2), in the first ``limit`` bytes."""
    runs = []
    head = data[:limit]
    i = 0
    while i < len(head):
        if 48 <= head[i] <= 57:
            utf16 = i + 1 < len(head) and head[i + 1] == 0
            step = 2 if utf16 else 1
            j = i
            while j < len(head) and 48 <= head[j] <= 57 and (not utf16 or (j + 1 < len(head) and head[j + 1] == 0)):
                j += step
            runs.append((i, j, step))
            i = j
        else:
            i += 1
    return runs


def mutate_digits(path: Path, rng: np.random.Generator) -> str:
    """A number written as text in a header (ImageJ/OME/ImageDescription, SIF, LIF and CZI XML, JSON) made 0, all
    9s, or longer (which moves every byte after it)."""
    target = _pick_file(path, rng, lambda p: p.suffix in (".tif", ".sif", ".lif", ".czi", ".nd2", ".json", ".npy")
                        or p.name in (".zarray", "zarr.json"))
    data = target.read_bytes()
    limit = 1 << 16 if not data.startswith(b"ZISRAWFILE") else len(data)
    runs = _digit_runs(data, limit)
    if not runs:
        return f"{target.name}: no number written as text"
    start, end, step = runs[int(rng.integers(len(runs)))]
    n = (end - start) // step
    choice = int(rng.integers(4))
    text = ["0" * n, "9" * n, "1" + "0" * (n - 1) if n > 1 else "0", "9" * (n + 6)][choice]
    encoded = text.encode() if step == 1 else text.encode("utf-16-le")
    target.write_bytes(data[:start] + encoded + data[end:])
    return f"{target.name}: number {data[start:end:step].decode()!r} at byte {start} -> {text!r}"


def _special_value(rng: np.random.Generator) -> Any:
    return [0, -1, 1, 2**31, 2**53, 10**12, -(10**9), 1e308, 0.5, -0.0, None, "", "x", [], {}, [0], True,
            float("nan"), float("inf")][int(rng.integers(19))]


def _leaves(node: Any, prefix: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    yield prefix, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, (*prefix, i))


def _edit_tree(tree: Any, rng: np.random.Generator) -> tuple[Any, str]:
    """One edit of a parsed JSON/YAML document: a value replaced (numbers made 0, -1, huge, NaN, a string, ...),
    a key removed, or a list shortened or doubled."""
    spots = [(p, v) for p, v in _leaves(tree) if p]
    if not spots:
        return _special_value(rng), "document replaced"
    numbers = [(p, v) for p, v in spots if isinstance(v, (int, float)) and not isinstance(v, bool)]
    pool = numbers if numbers and rng.random() < 0.6 else spots
    where, value = pool[int(rng.integers(len(pool)))]
    parent = tree
    for k in where[:-1]:
        parent = parent[k]
    key = where[-1]
    kind = int(rng.integers(10))
    if kind == 0 and isinstance(parent, dict):
        del parent[key]
        return tree, f"{'/'.join(map(str, where))} removed"
    if kind == 1 and isinstance(value, list):
        parent[key] = value[:-1] if rng.random() < 0.5 else value + value
        return tree, f"{'/'.join(map(str, where))} list shortened or doubled"
    new = _special_value(rng)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and rng.random() < 0.4:
        new = [0, -1, value * 1000, value * 10**9 if isinstance(value, int) else value * 1e30, -value][
            int(rng.integers(5))]
    parent[key] = new
    return tree, f"{'/'.join(map(str, where))}: {value!r} -> {new!r}"


def mutate_json(path: Path, rng: np.random.Generator) -> str:
    candidates = [f for f in _files(path) if f.name in (".zarray", ".zattrs", ".zgroup", "zarr.json")
                  or f.suffix == ".json"]
    if not candidates:
        return "no JSON file"
    target = candidates[int(rng.integers(len(candidates)))]
    try:
        tree = json.loads(target.read_text())
    except ValueError:
        return f"{target.name}: not JSON"
    tree, what = _edit_tree(tree, rng)
    target.write_text(json.dumps(tree))
    return f"{target.name}: {what}"


def mutate_delete(path: Path, rng: np.random.Generator) -> str:
    files = _files(path)
    if len(files) < 2:
        return "one file, none deleted"
    chunks = [f for f in files if not _is_meta(f)]
    pool = chunks if chunks and rng.random() < 0.7 else files
    gone = []
    for _ in range(int(rng.integers(1, 4))):
        target = pool[int(rng.integers(len(pool)))]
        if target.exists():
            target.unlink()
            gone.append(target.relative_to(path).as_posix())
    return f"deleted {gone}"


def mutate_yaml(path: Path, rng: np.random.Generator) -> str:
    import yaml

    candidates = [f for f in _files(path) if f.suffix == ".yaml"]
    if not candidates:
        return "no YAML file"
    target = candidates[int(rng.integers(len(candidates)))]
    try:
        docs = list(yaml.safe_load_all(target.read_text()))
    except yaml.YAMLError:
        return f"{target.name}: not YAML"
    i = int(rng.integers(len(docs))) if docs else 0
    if not docs:
        docs = [None]
    docs[i], what = _edit_tree(docs[i], rng)
    target.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return f"{target.name}: {what}"


def mutate_text(path: Path, rng: np.random.Generator) -> str:
    """A text file edited as bytes: a line deleted, doubled or cut, a character replaced by one YAML or CSV gives a
    meaning (``:``, ``-``, ``[``, a tab, a quote, a comma)."""
    candidates = [f for f in _files(path) if f.suffix in (".yaml", ".csv", ".txt", ".json")]
    if not candidates:
        return "no text file"
    target = candidates[int(rng.integers(len(candidates)))]
    lines = target.read_bytes().split(b"\n")
    i = int(rng.integers(len(lines)))
    kind = int(rng.integers(4))
    if kind == 0:
        del lines[i]
    elif kind == 1:
        lines.insert(i, lines[i])
    elif kind == 2 and lines[i]:
        lines[i] = lines[i][:int(rng.integers(len(lines[i])))]
    elif lines[i]:
        j = int(rng.integers(len(lines[i])))
        lines[i] = lines[i][:j] + [b":", b"-", b"[", b"\t", b'"', b",", b"{", b"\x00"][int(rng.integers(8))] + \
            lines[i][j + 1:]
    target.write_bytes(b"\n".join(lines))
    return f"{target.name}: line {i} edited ({['deleted', 'doubled', 'cut', 'character'][kind]})"


CSV_VALUES = ("nan", "NaN", "inf", "-inf", "", "abc", "-1", "0", "1e308", "-1e308", "1e20", "-1e20", "1.5", "2e9",
              "9223372036854775807", "1,2", '"')


def mutate_csv(path: Path, rng: np.random.Generator) -> str:
    """CSV cells given values ThunderSTORM files can carry and worse; or a header renamed or removed. rapidSTORM's
    rows are cells separated by spaces."""
    target = next(f for f in _files(path) if f.suffix in (".csv", ".txt"))
    if target.suffix == ".txt":
        lines = target.read_text().split("\n")
        edits = []
        for _ in range(int(rng.integers(1, 6))):
            i = int(rng.integers(1, max(2, len(lines) - 1)))
            cells = lines[i].split(" ")
            j = int(rng.integers(len(cells)))
            cells[j] = CSV_VALUES[int(rng.integers(len(CSV_VALUES)))].replace(",", " ")
            lines[i] = " ".join(cells)
            edits.append((i, j, cells[j]))
        target.write_text("\n".join(lines))
        return f"{target.name}: cells {edits}"
    lines = target.read_text().split("\n")
    if rng.random() < 0.15:
        header = lines[0].split(",")
        j = int(rng.integers(len(header)))
        old = header[j]
        if rng.random() < 0.5:
            del header[j]
        else:
            header[j] = '"' + ["x", "frame", "x [px]", "y [nm]", "frame", ""][int(rng.integers(6))] + '"'
        lines[0] = ",".join(header)
        target.write_text("\n".join(lines))
        return f"{target.name}: header {old} -> {','.join(header)[:60]}"
    edits = []
    for _ in range(int(rng.integers(1, 6))):
        i = int(rng.integers(1, max(2, len(lines) - 1)))
        cells = lines[i].split(",")
        if not lines[i]:
            continue
        j = int(rng.integers(len(cells)))
        cells[j] = CSV_VALUES[int(rng.integers(len(CSV_VALUES)))]
        lines[i] = ",".join(cells)
        edits.append((i, j, cells[j]))
    target.write_text("\n".join(lines))
    return f"{target.name}: cells {edits}"


def mutate_h5(path: Path, rng: np.random.Generator) -> str:
    """An HDF5 file's attributes or datasets edited with h5py (a PSF's x0, dz, z_range, its coefficients' shape;
    Picasso's /locs columns)."""
    import h5py

    target = next((f for f in _files(path) if f.suffix in (".h5", ".hdf5", ".mat")), None)
    if target is None:
        return "no HDF5 file"
    import h5py as _h5py

    if not _h5py.is_hdf5(target):
        return f"{target.name}: not HDF5"
    try:
        f = h5py.File(target, "r+")
    except OSError:
        return f"{target.name}: not HDF5"
    with f:
        names = list(f.attrs)
        datasets: list[str] = []
        f.visititems(lambda k, v: datasets.append(k) if isinstance(v, h5py.Dataset) else None)
        groups: list[str] = []
        f.visititems(lambda k, v: groups.append(k) if isinstance(v, h5py.Group) and v.attrs else None)
        if groups and rng.random() < 0.3:  # an attribute of a group (DECODE's meta, SMAP's MATLAB classes)
            group = f[groups[int(rng.integers(len(groups)))]]
            name = list(group.attrs)[int(rng.integers(len(group.attrs)))]
            value = [0, -1, 1e30, float("nan"), np.bytes_(b"text"), np.arange(5.0)][int(rng.integers(6))]
            group.attrs[name] = value
            return f"{target.name}: attribute {group.name}/{name} -> {value!r}"
        if names and (not datasets or rng.random() < 0.5):
            name = names[int(rng.integers(len(names)))]
            value = [0, -1, 1e30, float("nan"), float("inf"), np.bytes_(b"text"), np.zeros(0), np.arange(5.0),
                     2**40, None][int(rng.integers(10))]
            if value is None:
                del f.attrs[name]
            else:
                f.attrs[name] = value
            return f"{target.name}: attribute {name} -> {value!r}"
        if not datasets:
            return f"{target.name}: nothing to edit"
        name = datasets[int(rng.integers(len(datasets)))]
        ds = f[name]
        if ds.dtype.names and len(ds) and rng.random() < 0.7:  # a compound table: one column's values
            column = ds.dtype.names[int(rng.integers(len(ds.dtype.names)))]
            block = ds[()]
            rows = rng.integers(0, len(block), int(rng.integers(1, 6)))
            value = [np.nan, np.inf, -np.inf, -1, 1e30, -1e30, 2**31, 0][int(rng.integers(8))]
            with contextlib.suppress(ValueError, OverflowError, TypeError):
                block[column][rows] = value
            ds[...] = block
            return f"{target.name}: {name}.{column} rows {list(rows)} -> {value}"
        data = ds[()]
        del f[name]
        kind = int(rng.integers(4))
        if kind == 0 and np.ndim(data):
            f.create_dataset(name, data=data[:max(0, len(data) // 2)])
        elif kind == 1 and np.ndim(data) > 1:
            f.create_dataset(name, data=data.reshape(-1))
        elif kind == 2 and data.dtype.kind == "f":
            bad = data.copy()
            bad.flat[int(rng.integers(bad.size))] = np.nan
            f.create_dataset(name, data=bad)
        else:
            f.create_dataset(name, data=np.bytes_(b"text"))
        return f"{target.name}: dataset {name} edited ({kind})"


def mutate_zip(path: Path, rng: np.random.Generator) -> str:
    """A ShareLoc ``.smlm`` (a zip): its manifest's JSON edited (column types, sizes, offsets, the table's length),
    or one of its binary tables cut or grown."""
    import zipfile

    target = next(f for f in _files(path) if f.suffix == ".smlm")
    try:
        with zipfile.ZipFile(target) as zf:
            members = {i.filename: zf.read(i.filename) for i in zf.infolist()}
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        return f"{target.name}: not a zip ({type(e).__name__})"
    name = "manifest.json" if "manifest.json" in members and rng.random() < 0.7 else \
        list(members)[int(rng.integers(len(members)))]
    if name == "manifest.json":
        try:
            tree, what = _edit_tree(json.loads(members[name]), rng)
            members[name] = json.dumps(tree).encode()
        except ValueError:
            what = "not JSON"
    else:
        data = members[name]
        members[name] = data[:int(rng.integers(len(data) + 1))] if rng.random() < 0.7 else data + data
        what = f"{len(data)} -> {len(members[name])} bytes"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in members.items():
            zf.writestr(member, data)
    return f"{target.name}: {name}: {what}"


def mutate_checkpoint(path: Path, rng: np.random.Generator) -> str:
    """A checkpoint's metadata or model settings edited, the weights kept (torch.save of the edited dict)."""
    import torch

    target = next(f for f in _files(path) if f.suffix == ".pt")
    try:
        state = torch.load(target, weights_only=True)
    except Exception:
        return f"{target.name}: not loadable"
    part = ["meta", "model_config", "format_version", "model"][int(rng.choice(4, p=[0.55, 0.35, 0.05, 0.05]))]
    if part == "format_version":
        state[part] = _special_value(rng)
        what = f"format_version -> {state[part]!r}"
    elif part == "model":
        keys = list(state["model"])
        key = keys[int(rng.integers(len(keys)))]
        state["model"][key] = state["model"][key].reshape(-1)[:1].clone()
        what = f"weight {key} cut to one value"
    else:
        state[part], what = _edit_tree(state[part], rng)
        what = f"{part}/{what}"
    torch.save(state, target)
    return f"{target.name}: {what}"


def mutate_tiff_tag(path: Path, rng: np.random.Generator) -> str:
    """A TIFF tag's count or value (ImageWidth, StripOffsets, BitsPerSample, ...) set to 0, 1, huge or a random
    number: the header numbers a reader must check against the file's size."""
    tiffs = [f for f in _files(path) if f.suffix in (".tif", ".tiff")]
    if not tiffs:
        return "no TIFF"
    target = tiffs[int(rng.integers(len(tiffs)))]
    data = bytearray(target.read_bytes())
    entries = _tiff_entries(bytes(data))
    if not entries:
        return f"{target.name}: no IFD entries"
    at, tag, typ, _count, value_at, bo = entries[int(rng.integers(len(entries)))]
    big = data[2:4] in (b"+\0", b"\0+")
    value = int(rng.choice(SPECIAL_INTS)) if rng.random() < 0.8 else int(rng.integers(0, 1 << 20))
    if rng.random() < 0.3:
        width, pos, what = (8 if big else 4), at + 4, "count"
    else:
        width, pos, what = {3: 2, 1: 1, 16: 8}.get(typ, 4 if not big else 8), value_at, "value"
    data[pos:pos + width] = (value % 2**(8 * width)).to_bytes(width, "little" if bo == "<" else "big")
    target.write_bytes(bytes(data))
    return f"{target.name}: tag {tag} {what} -> {value}"


MUTATORS: dict[str, Callable[[Path, np.random.Generator], str]] = {
    "flip": mutate_flip, "truncate": mutate_truncate, "int": mutate_int, "digits": mutate_digits,
    "json": mutate_json, "delete": mutate_delete, "yaml": mutate_yaml, "text": mutate_text, "csv": mutate_csv,
    "h5": mutate_h5, "checkpoint": mutate_checkpoint, "tiff_tag": mutate_tiff_tag, "zip": mutate_zip,
}


# ------------------------------------------------------------------------------------------------ the readers

@dataclass(frozen=True)
class Reader:
    """One reader: its seeds, how it reads an input whole (in the child), and its mutations with weights."""

    name: str
    kind: str  # 'stack', 'table' or 'config'
    seeds: Callable[[Path], list[Path]]
    read: Callable[[Path], dict[str, Any]]
    mutators: dict[str, float]
    needs: str | None = None  # a formats-extra library (VENDOR_LIBRARIES key)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # seed file name -> open_stack options
    source: str | None = None  # decode_mem's module of the format, where older commits lack it (bench --against)

    def in_tree(self, root: Path) -> bool:
        """Whether the decode_mem checked out at ``root`` has this reader."""
        return self.source is None or (root / self.source).is_file()

    def available(self) -> bool:
        if self.needs is None:
            return True
        import importlib.util

        return importlib.util.find_spec(VENDOR_LIBRARIES[self.needs].split(".")[0]) is not None


def _stack_reader(name: str, seeds: Callable[[Path], list[Path]], mutators: dict[str, float], *,
                  needs: str | None = None, options: dict[str, dict[str, Any]] | None = None) -> Reader:
    options = options or {}

    def read(path: Path) -> dict[str, Any]:
        return read_stack(path, **options.get(path.name, {}))

    return Reader(name, "stack", seeds, read, mutators, needs, options)


_TIFF = {"flip": 2, "truncate": 2, "int": 1, "tiff_tag": 4, "digits": 2}
_ZARR = {"json": 5, "delete": 2, "flip": 1, "truncate": 1, "text": 1}
_BINARY = {"flip": 3, "truncate": 3, "int": 3, "digits": 2}
_FOLDER = {"delete": 2, "flip": 2, "truncate": 2, "tiff_tag": 2, "int": 1}

READERS: dict[str, Reader] = {r.name: r for r in [
    *(_stack_reader(f"tiff {f}", (lambda folder, f=f: _tiff_seeds(folder, f)), _TIFF,
                    options={"imagej.tif": {"channel": 0}})
      for f in ("contiguous", "compressed", "tiled", "ome", "pages", "bigtiff", "imagej")),
    *(_stack_reader(f"zarr {f}", (lambda folder, f=f: _zarr_seeds(folder, f)), _ZARR)
      for f in ("v2", "v3", "sharded", "ome")),
    _stack_reader("folder", _folder_seeds, _FOLDER),
    _stack_reader("npy", _npy_seeds, {"flip": 2, "truncate": 2, "int": 1, "digits": 3}),
    _stack_reader("nd2", lambda folder: _vendor_seeds(folder, "nd2"), _BINARY, needs="nd2"),
    _stack_reader("czi", lambda folder: _vendor_seeds(folder, "czi"), _BINARY, needs="czi",
                  options={"LLS7_small.czi": {"channel": 1, "z": 2}}),
    _stack_reader("lif", lambda folder: _vendor_seeds(folder, "lif"), _BINARY, needs="lif",
                  options={"LeicaLASX_wavelength-sweep_example.lif": {"series": 2, "z": 4, "channel": 3}}),
    _stack_reader("sif", lambda folder: _vendor_seeds(folder, "sif"), _BINARY, needs="sif"),
    _stack_reader("ndtiff", lambda folder: _vendor_seeds(folder, "ndtiff"),
                  {"int": 3, "flip": 2, "truncate": 2, "delete": 1, "json": 1}, needs="ndtiff",
                  options={"12_bit_pycromanager_mda": {"channel": 1}}),
    Reader("thunderstorm csv", "table", lambda folder: _table_seeds(folder, "csv"), read_table,
           {"csv": 6, "text": 2, "truncate": 1, "flip": 1}),
    Reader("picasso hdf5", "table", lambda folder: _table_seeds(folder, "picasso"), read_table,
           {"h5": 4, "yaml": 3, "text": 1, "flip": 1, "truncate": 1}),
    Reader("parquet", "table", lambda folder: _table_seeds(folder, "parquet"), read_table,
           {"flip": 3, "truncate": 2, "int": 2}),
    Reader("smap mat", "table", lambda folder: _table_seeds(folder, "smap"), read_table,
           {"h5": 4, "flip": 2, "truncate": 2, "int": 1}, source="decode_mem/io/smap.py"),
    Reader("smap mat v7", "table", lambda folder: _table_seeds(folder, "smap_v7"), read_table,
           {"flip": 3, "truncate": 2, "int": 3, "digits": 1}, source="decode_mem/io/smap.py"),
    Reader("shareloc smlm", "table", lambda folder: _table_seeds(folder, "smlm"), read_table,
           {"zip": 4, "flip": 2, "truncate": 2, "int": 2}, source="decode_mem/io/smlm.py"),
    Reader("decode h5", "table", lambda folder: _table_seeds(folder, "decode"), read_table,
           {"h5": 4, "flip": 2, "truncate": 2}, source="decode_mem/io/decode_h5.py"),
    Reader("rapidstorm txt", "table", lambda folder: _table_seeds(folder, "rapidstorm"), read_table,
           {"csv": 4, "text": 2, "digits": 2, "truncate": 1, "flip": 1}, source="decode_mem/io/rapidstorm.py"),
    Reader("camera yaml", "config", _camera_seeds, read_camera, {"yaml": 5, "text": 3, "flip": 1, "truncate": 1}),
    Reader("pipeline yaml", "config", _pipeline_seeds, read_pipeline, {"yaml": 5, "text": 3, "flip": 1}),
    Reader("psf file", "config", _psf_seeds, read_psf_file, {"h5": 5, "flip": 2, "truncate": 1}),
    Reader("checkpoint", "config", _checkpoint_seeds, read_checkpoint, {"checkpoint": 6, "flip": 1, "truncate": 1}),
]}


def _probe(kind: str) -> Callable[[Path], dict[str, Any]]:
    """A reader that misbehaves on purpose, to show that the harness tells each defect apart (``PROBES``)."""

    def read(path: Path) -> dict[str, Any]:
        if kind == "hang":
            while True:
                time.sleep(0.1)
        if kind == "oom":
            np.ones(2**40, np.uint8)  # a header's claim taken at its word
        if kind == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        if kind == "unclean":
            raise TypeError("a bug")
        if kind == "unnamed":
            from decode_mem.errors import StackError

            raise StackError("something is wrong, but not said where")
        if kind == "error":
            from decode_mem.errors import StackError

            raise StackError(f"{path}: a clean error")
        return {}

    return read


PROBES: dict[str, Reader] = {f"probe {k}": Reader(f"probe {k}", "probe", _npy_seeds, _probe(k), {"flip": 1})
                             for k in ("read", "error", "unnamed", "unclean", "hang", "crash", "oom")}


def reader(name: str) -> Reader:
    return READERS[name] if name in READERS else PROBES[name]


# ------------------------------------------------------------------------------------------------ cases

@dataclass(frozen=True)
class Case:
    """One fuzz case: a reader's seed and the mutations applied to a copy of it (name, seed of each)."""

    reader: str
    seed: int  # index into the reader's seeds
    number: int
    mutations: tuple[tuple[str, int], ...]

    @property
    def id(self) -> str:
        return f"{self.reader.replace(' ', '_')}-{self.seed}-{self.number}"


def draw_case(reader: Reader, n_seeds: int, number: int, base: int = 0) -> Case:
    """The case ``number`` of a reader: its seed and 1 to 3 mutations, drawn from ``(base, number)``."""
    rng = np.random.default_rng([base, number, sum(map(ord, reader.name))])
    names = list(reader.mutators)
    weights = np.array([reader.mutators[k] for k in names], float)
    k = int(rng.choice([1, 1, 1, 2, 2, 3]))
    mutations = tuple((names[int(rng.choice(len(names), p=weights / weights.sum()))], int(rng.integers(2**31)))
                      for _ in range(k))
    return Case(reader.name, int(rng.integers(n_seeds)), number, mutations)


def draw_cases(count: int, *, seeds: dict[str, list[Path]], readers: Iterable[str] | None = None,
               first: int = 0) -> list[Case]:
    """``count`` cases spread evenly over ``readers`` (every reader with seeds by default), each reader's numbered
    ``first``, ``first + 1``, ..."""
    names = [n for n in (readers or READERS) if n in seeds]
    return [draw_case(READERS[names[i % len(names)]], len(seeds[names[i % len(names)]]), first + i // len(names))
            for i in range(count)]


def build_seeds(folder: Path, readers: Iterable[str] | None = None) -> dict[str, list[Path]]:
    """Every available reader's seed inputs written under ``folder`` (one sub-folder per reader)."""
    out = {}
    for name in readers or READERS:
        entry = reader(name)
        if not entry.available():
            continue
        where = folder / name.replace(" ", "_")
        where.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[name] = entry.seeds(where)
    return out


def build_case(case: Case, seeds: dict[str, list[Path]], folder: Path) -> tuple[Path, Path, list[str]]:
    """The case's input under ``folder``: a copy of its seed with its mutations applied. A seed file is copied into
    a folder of its own with the files that belong to it (a Picasso file's ``.yaml``, a camera YAML's maps), and the
    mutations pick among them; a seed folder (zarr, NDTiff, frame files) is copied whole. Returns the input, what
    the mutations worked on, and what each of them did."""
    seed = seeds[case.reader][case.seed]
    folder.mkdir(parents=True, exist_ok=True)
    if seed.is_dir():
        target = folder / seed.name
        shutil.copytree(seed, target)
        mutable = target
    else:
        mutable = folder / "input"
        mutable.mkdir()
        for companion in seed.parent.iterdir():
            if companion.is_file() and (companion.stem == seed.stem or (seed.suffix == ".yaml"
                                                                        and companion.suffix == ".npy")):
                shutil.copy(companion, mutable / companion.name)
        target = mutable / seed.name
    done = []
    for name, number in case.mutations:
        try:
            done.append(MUTATORS[name](mutable, np.random.default_rng(number)))
        except Exception as e:  # a mutation that does not apply to what earlier ones left (HDF5 no longer HDF5)
            done.append(f"{name}: not applied ({type(e).__name__}: {str(e)[:80]})")
    return target, mutable, done


# ------------------------------------------------------------------------------------------------ running

@dataclass
class Result:
    """What one case gave."""

    case: Case
    outcome: str
    seconds: float
    message: str = ""  # the exception's type and first line, or what the read found wrong
    mutations: list[str] = field(default_factory=list)
    where: str = ""  # the innermost frames of an unclean exception's traceback
    peak_mib: float | None = None

    @property
    def defect(self) -> bool:
        return self.outcome not in CLEAN


def _names_file(message: str, files: list[Path]) -> bool:
    return any(f.name in message for f in files)


def _run_child(case: Case, seeds: dict[str, list[Path]], work: Path, memory_mib: int) -> tuple:
    """Run one case in this (forked) process: ``(outcome, message, mutations, where, peak MiB)``."""
    mutations: list[str] = []
    try:
        target, mutable, mutations = build_case(case, seeds, work)
        files = [target] if target.is_dir() else list(mutable.iterdir())  # what an error may name
    except Exception as e:  # the harness itself failed: said as such, never a reader's defect
        return "harness", f"building the case failed: {type(e).__name__}: {e}", mutations, _where(e), None
    resource.setrlimit(resource.RLIMIT_AS, (_vm_bytes() + memory_mib * 2**20, resource.RLIM_INFINITY))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reader(case.reader).read(target)
        outcome, message, where = "read", "", ""
    except BadRead as e:
        outcome, message, where = "bad read", str(e), _where(e)
    except MemoryError as e:
        outcome, message, where = "oom", f"MemoryError: {e}"[:300], _where(e)
    except Exception as e:
        from decode_mem.errors import DecodeMemError

        text = str(e)
        if isinstance(e, DecodeMemError):
            one_line = "\n" not in text.strip()
            outcome = "error" if one_line and _names_file(text, files) else "unnamed"
        else:
            outcome = "unclean"
        message, where = f"{type(e).__name__}: {text}"[:600], _where(e)
    return outcome, message, mutations, where, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _vm_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def _where(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)[-3:]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames))


def _send(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj)
    os.write(fd, struct.pack("<Q", len(data)))
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _receive(fd: int) -> Any:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            part = os.read(fd, n - len(out))
            if not part:
                raise EOFError
            out += part
        return out

    return pickle.loads(exactly(struct.unpack("<Q", exactly(8))[0]))


def serve(time_limit: float, memory_mib: int) -> None:
    """The fork server (``python -c 'import fuzz_readers; fuzz_readers.serve(...)'``): decode_mem and the readers'
    libraries imported once; for each request ``(index, case, seeds, folder, seconds)`` read from stdin a child
    forked at once, limited (``memory_mib``; ``seconds``, or ``time_limit`` where None) and timed, and
    ``(index, outcome, message, mutations, where, peak MiB, seconds)`` written to stdout when it ends. The server
    itself never reads a case's file; the caller bounds how many run at a time."""
    import importlib

    for name in [*PRELOAD, *(m for k, m in VENDOR_LIBRARIES.items() if READERS[k].available())]:
        with contextlib.suppress(ImportError):  # an older decode_mem (--against) has fewer modules
            importlib.import_module(name)
    out = os.dup(1)
    os.dup2(2, 1)  # a library that prints must not write into the results
    children: dict[int, list] = {}  # result pipe -> [index, pid, start, data, work, limit]
    taking = True
    while taking or children:
        now = time.monotonic()
        for fd, (i, pid, start, _data, work, limit) in list(children.items()):
            if now - start > limit:  # a hang: killed, said so
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os.close(fd)
                del children[fd]
                _cleanup(work)
                _send(out, (i, "hang", f"still running after {limit:g} s", [], "", None, now - start))
        wait = min([c[5] - (now - c[2]) for c in children.values()] + [1.0])
        ready, _, _ = select.select(([0] if taking else []) + list(children), [], [], max(0.0, wait))
        for fd in ready:
            if fd == 0:
                try:
                    i, case, seeds, folder, limit = _receive(0)
                except EOFError:
                    taking = False
                    continue
                r, w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(r)
                    _child(w, case, seeds, Path(folder), memory_mib)
                os.close(w)
                children[r] = [i, pid, time.monotonic(), b"", Path(folder), limit or time_limit]
                continue
            part = os.read(fd, 1 << 16)
            if part:
                children[fd][3] += part
                continue
            i, pid, start, data, work, _limit = children.pop(fd)
            os.close(fd)
            _, status = os.waitpid(pid, 0)
            seconds = time.monotonic() - start
            reply = pickle.loads(data[8:]) if len(data) > 8 else _died(status, work)
            _cleanup(work)
            _send(out, (i, *reply, seconds))


def _child(w: int, case: Case, seeds: dict[str, list[Path]], work: Path, memory_mib: int) -> None:
    """The forked child: its output to a log beside its folder, one case, its result on ``w``, gone without
    clean-up (``os._exit``)."""
    fd = os.open(_log(work), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    try:
        got = _run_child(case, seeds, work, memory_mib)
    except BaseException as e:  # anything: it is reported, the child ends
        got = ("unclean", f"{type(e).__name__}: {e}"[:600], [], _where(e), None)
    with contextlib.suppress(BaseException):
        _send(w, got)
    os._exit(0)


def _log(work: Path) -> Path:
    return work.parent / f"{work.name}.log"


def _cleanup(work: Path) -> None:
    with contextlib.suppress(OSError):
        _log(work).unlink()
    shutil.rmtree(work, ignore_errors=True)


def _died(status: int, work: Path) -> tuple:
    """A child that ended without a result: a signal (crash), or the memory limit (C++'s bad_alloc aborts)."""
    try:
        tail = _log(work).read_text(errors="replace")[-600:]
    except OSError:
        tail = ""
    memory = any(w in tail for w in ("bad_alloc", "MemoryError", "Cannot allocate memory", "out of memory"))
    name = signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else \
        f"exit {os.WEXITSTATUS(status)}"
    return ("oom" if memory else "crash", f"{name}: {tail.strip()[-300:]}", [], "", None)


class Server:
    """The fork server as seen from here: ``run`` sends it cases, ``jobs`` at a time, and yields results as they
    come."""

    def __init__(self, jobs: int = 2, time_limit: float = TIME_LIMIT_S, memory_mib: int = MEMORY_MIB,
                 decode_mem_root: Path | None = None) -> None:
        root = decode_mem_root or ROOT  # where the decode_mem to fuzz is imported from (another commit's tree)
        env = {**os.environ, "MALLOC_ARENA_MAX": "2",  # per-thread malloc arenas would eat the address-space limit
               "ARROW_DEFAULT_MEMORY_POOL": "system",  # jemalloc's reservations likewise
               "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), str(root),
                                              os.environ.get("PYTHONPATH", "")])}
        code = f"import fuzz_readers; fuzz_readers.serve({time_limit!r}, {memory_mib!r})"
        self.jobs = jobs
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, cwd=str(root))

    def run(self, cases: list[Case], seeds: dict[str, list[Path]], workdir: Path,
            time_limit: float | None = None) -> Iterator[tuple[int, Result]]:
        """Each case's ``(index, result)`` as it ends (``time_limit``: seconds, other than the server's)."""
        workdir.mkdir(parents=True, exist_ok=True)
        pending = list(enumerate(cases))[::-1]
        in_flight = 0
        while pending or in_flight:
            while pending and in_flight < self.jobs:
                i, case = pending.pop()
                _send(self.proc.stdin.fileno(), (i, case, seeds, str(workdir / f"case{i}"), time_limit))
                in_flight += 1
            try:
                i, outcome, message, mutations, where, peak, seconds = _receive(self.proc.stdout.fileno())
            except EOFError:
                raise RuntimeError(f"the fuzz server ended (exit {self.proc.wait()})") from None
            in_flight -= 1
            if not mutations:  # the child said nothing: what was done, rebuilt here
                again = workdir / f"again{i}"
                with contextlib.suppress(Exception):
                    _, _, mutations = build_case(cases[i], seeds, again)
                shutil.rmtree(again, ignore_errors=True)
            yield i, Result(cases[i], outcome, seconds, message, mutations, where, peak)

    def result(self, case: Case, seeds: dict[str, list[Path]], workdir: Path) -> Result:
        """One case's result."""
        return next(self.run([case], seeds, workdir))[1]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        self.proc.wait()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def run_cases(cases: list[Case], seeds: dict[str, list[Path]], workdir: Path, *, jobs: int = 2,
              time_limit: float = TIME_LIMIT_S, memory_mib: int = MEMORY_MIB, decode_mem_root: Path | None = None,
              on_result: Callable[[Result], None] | None = None, server: Server | None = None) -> list[Result]:
    """Run ``cases`` ``jobs`` at a time, each in a child with ``memory_mib`` MiB of address space beyond the
    server's and ``time_limit`` seconds; results in the cases' order. ``server``: one already started (its jobs,
    memory and code; ``time_limit`` still applies)."""
    results: dict[int, Result] = {}
    with contextlib.nullcontext(server) if server is not None else Server(jobs, time_limit, memory_mib,
                                                                          decode_mem_root) as running:
        for i, result in running.run(cases, seeds, workdir, time_limit):
            results[i] = result
            if on_result is not None:
                on_result(result)
    return [results[i] for i in range(len(cases))]


def signature(result: Result) -> tuple[str, str]:
    """What a defect is, for minimizing: its outcome and the exception's type."""
    return result.outcome, result.message.split(":")[0] if result.outcome in ("unclean", "oom") else ""


def minimize(case: Case, seeds: dict[str, list[Path]], workdir: Path, wanted: tuple[str, str],
             server: Server) -> Case:
    """The case with as few of its mutations as still give the defect ``wanted`` (``signature``) on ``server``
    (each left out in turn)."""
    mutations = list(case.mutations)
    changed = True
    while changed and len(mutations) > 1:
        changed = False
        for i in range(len(mutations)):
            fewer = Case(case.reader, case.seed, case.number, tuple(mutations[:i] + mutations[i + 1:]))
            if signature(server.result(fewer, seeds, workdir)) == wanted:
                mutations = list(fewer.mutations)
                changed = True
                break
    return Case(case.reader, case.seed, case.number, tuple(mutations))


def save_input(case: Case, seeds: dict[str, list[Path]], name: str) -> str:
    """A case's input (built from its seed and mutations) kept as a regression input: ``tests/data/fuzz/<name>/``
    holds it (a file with the files that belong to it, or a folder); returns its path relative to ``FUZZ_DATA``."""
    scratch_dir = Path(tempfile.mkdtemp(prefix="decode_mem-fuzz-save-"))
    try:
        target, mutable, _ = build_case(case, seeds, scratch_dir)
        dest = FUZZ_DATA / name
        shutil.rmtree(dest, ignore_errors=True)
        if target.is_dir():
            dest.mkdir(parents=True)
            shutil.copytree(target, dest / target.name)
        else:
            shutil.copytree(mutable, dest)
        return (dest / target.name).relative_to(FUZZ_DATA).as_posix()
    finally:
        shutil.rmtree(scratch_dir, ignore_errors=True)


def regression_cases() -> tuple[list[dict], list[Case], dict[str, list[Path]]]:
    """The regression inputs of ``tests/data/fuzz/cases.json`` as cases without mutations: (entries, cases, seeds)."""
    entries = json.loads((FUZZ_DATA / "cases.json").read_text())
    seeds: dict[str, list[Path]] = {}
    cases = []
    for entry in entries:
        paths = seeds.setdefault(entry["reader"], [])
        paths.append(FUZZ_DATA / entry["input"])
        cases.append(Case(entry["reader"], len(paths) - 1, 0, ()))
    return entries, cases, seeds


def readme_text() -> str:
    """``tests/data/fuzz/README.md``: what each regression input is (from ``cases.json``)."""
    entries = json.loads((FUZZ_DATA / "cases.json").read_text())
    lines = ["# Regression inputs of the reader fuzzer", "",
             "Each folder holds one input that gave a defect when `tests/fuzz_readers.py` fuzzed decode_mem's readers "
             "(issue 73): a seed file (`fuzz_readers.READERS`) with the fewest of the case's mutations that still gave "
             "it. `tests/io/test_fuzz_readers.py` reads each with its reader, in a child process with a memory and a "
             "time limit, and checks the outcome it gives now (`cases.json`: `expect`, and `match` in the message). "
             "This page is written from `cases.json` by `fuzz_readers.readme_text()`.", "",
             "| input | reader | mutations | what it shows | before (measured) | now |", "|---|---|---|---|---|---|"]
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    for e in entries:
        now = e["expect"] + (f" (`{e['match']}`)" if e["match"] else "")
        lines.append("| " + " | ".join([f"`{e['input']}`", e["reader"], cell("; ".join(e["mutations"])), cell(e["why"]),
                                        cell(e["before"]), cell(now)]) + " |")
    return "\n".join(lines) + "\n"


def counts(results: list[Result]) -> dict[str, dict[str, int]]:
    """reader -> outcome -> cases."""
    out: dict[str, dict[str, int]] = {}
    for r in results:
        row = out.setdefault(r.case.reader, dict.fromkeys(OUTCOMES, 0))
        row[r.outcome] = row.get(r.outcome, 0) + 1
    return out


def scratch(prefix: str = "fuzz") -> Path:
    return Path(tempfile.mkdtemp(prefix=f"decode_mem-{prefix}-"))
