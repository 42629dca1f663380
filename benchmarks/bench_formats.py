"""Microscope files streamed: a >= 8 GB Zeiss CZI movie and Micro-Manager NDTiff dataset, written by the vendors' own
libraries, read end to end through `open_stack` against the same frames as TIFF, and infer on a frame range of each
against its memory plan.

    python benchmarks/bench_formats.py                  # 1 GiB and 8 GiB of each: results/formats.md (+ .json, .png)
    python benchmarks/bench_formats.py --size_gb 0.2 --small_gb 0.05 --repeat 1 --infer_frames 32 \\
        --out /tmp/formats_smoke.md                     # smoke: about 10 min on 2 busy cores
    python benchmarks/bench_formats.py --render benchmarks/results/formats.json   # the report again, nothing run

1. **Files.** A pool of SMLM frames simulated with ``decode_mem.simulate`` (``--pool`` frames, cycled) is written,
   frame by frame in a subprocess of its own (its peak RssAnon sampled), as a CZI by Zeiss's libCZI (pylibCZIrw),
   as an NDTiff dataset by Micro-Manager's ndtiff (which starts a new file every 4 GiB), and as a plain TIFF by
   tifffile: ``--small_gb`` and ``--size_gb`` GiB of pixels each.
2. **Reads.** Every file is read end to end in a fresh subprocess, as infer reads it: blocks of ``--block`` frames
   with one context frame each side (``edge_blocks``), one block read ahead (``prefetch``), a uint64 sum of each
   block's own frames as the consumer. Readers: ``open_stack(...).blocks()`` on each file (TIFF: memmap), and as
   references the same blocks read by each format's own library (pylibCZIrw ``CziReader.read``, ndtiff
   ``Dataset.read_image``, tifffile ``TiffFile.asarray(key=range)``). RssAnon and RssFile are sampled every 2 ms
   from /proc/self/status in a thread; "cold" runs first evict the files from the page cache
   (``posix_fadvise(DONTNEED)``, checked with ``fincore``), "warm" runs follow the cold one. The checksums of every
   run over one size must agree (the same frames in every format).
3. **infer on a frame range** of the large CZI and NDTiff (and, as the control, the TIFF): ``predict_stack`` over
   ``FrameRange(open_stack(file), start, start + --infer_frames)`` from the middle of the movie, shipped model,
   sizes 'auto' as infer chooses them, in a fresh subprocess (``MALLOC_ARENA_MAX=1``, as the command-line tools
   run), twice per file: first with an empty plan cache (a new machine's first run: the candidates are timed in
   the same process), then again with the sizes remembered. Peak RssAnon by ``measure_phase`` (2 ms samples and
   the reset VmHWM) against the plan that run made (``on_plan``) and the one ``python -m decode_mem.plan`` prints
   for the same frames from the same cache. Goal: peak <= plan + 15 %.
4. **Real samples** (tests/data/vendor: ND2, LIF, SIF, CZI, NDTiff, a few hundred KB each): open + read of every
   frame through ``open_stack``, repeated, in a fresh subprocess: small-file numbers (opening dominates).

Scratch data live in ``--workdir`` (git-ignored ``benchmarks/scratch`` by default), one size at a time (the three
large files together: about 3x ``--size_gb``), and are deleted as each size is done unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
from bench_io import PeakSampler, evict, files_of, proc_status_kb, resident_mib
from command_line import command_line
from machine import commit, cpu_name, load_average, machine_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MiB = 2**20
GiB = 2**30
GOAL = 1.15  # infer's peak RssAnon within its plan + 15 %
FORMATS = ("czi", "ndtiff", "tiff")
READERS = {  # file kind -> (reader label, mode): decode_mem first, then the format's own library
    "czi": (("open_stack", "stack"), ("pylibCZIrw CziReader.read", "pylibCZIrw")),
    "ndtiff": (("open_stack", "stack"), ("ndtiff Dataset.read_image", "ndtiff")),
    "tiff": (("open_stack (memmap)", "stack"), ("tifffile TiffFile.asarray(key=range)", "tifffile")),
}
FORMAT_NAMES = {"czi": "Zeiss CZI (pylibCZIrw)", "ndtiff": "Micro-Manager NDTiff (ndtiff)", "tiff": "TIFF (tifffile)"}
SAMPLES = (  # (label, path under tests/data/vendor, open_stack options)
    ("Nikon ND2", "nd2/example-timelapse.nd2", {}),
    ("Leica LIF", "lif/LeicaLASX_wavelength-sweep_example.lif", {"series": 2, "z": 0, "channel": 0}),
    ("Andor SIF", "sif/test_multiframe.sif", {}),
    ("Zeiss CZI", "czi/LLS7_small.czi", {"z": 0, "channel": 0}),
    ("Micro-Manager NDTiff", "ndtiff/ndtiff3.2_11bit_1", {}),
)
SAMPLE_REPEATS = 20


# -- children: each measurement in a fresh process ---------------------------------------------------------------

def child(spec: dict) -> dict:
    return {"write": child_write, "read": child_read, "infer": child_infer, "sample": child_sample}[spec["op"]](spec)


def child_write(spec: dict) -> dict:
    """Write ``frames`` frames cycled from the pool as one file kind, frame by frame; the writer's peak RssAnon."""
    import tifffile

    pool = tifffile.imread(spec["pool"])
    n, path = int(spec["frames"]), Path(spec["path"])
    base = proc_status_kb()["RssAnon"]
    sampler = PeakSampler()
    sampler.start()
    t0 = time.perf_counter()
    if spec["kind"] == "czi":
        from pylibCZIrw import czi as pyczi

        with pyczi.create_czi(str(path), exist_ok=True) as czi:
            for t in range(n):
                czi.write(pool[t % len(pool)], plane={"T": t, "Z": 0, "C": 0})
            czi.write_metadata(scale_x=0.1, scale_y=0.1)  # µm: 100 nm pixels
        dataset = path
    elif spec["kind"] == "ndtiff":
        from ndtiff import NDTiffDataset

        path.mkdir(parents=True, exist_ok=True)
        ds = NDTiffDataset(str(path), name="acq", writable=True, summary_metadata={"Prefix": "acq"})
        for t in range(n):
            ds.put_image({"time": t}, pool[t % len(pool)], {})
        ds.finish()
        ds.close()
        dataset = next(p for p in path.iterdir() if p.is_dir())  # ndtiff writes <path>/acq_1/
    else:
        nbytes = n * pool[0].nbytes
        tifffile.imwrite(path, (pool[t % len(pool)] for t in range(n)), shape=(n, *pool.shape[1:]),
                         dtype=pool.dtype, bigtiff=nbytes > 2**32 - 2**25, photometric="minisblack")
        dataset = path
    seconds = time.perf_counter() - t0
    sampler.stop()
    files = files_of(dataset)
    return {"seconds": seconds, "dataset": str(dataset), "files": len(files),
            "image_files": sum(f.suffix == ".tif" for f in files) if spec["kind"] == "ndtiff" else 1,
            "file_sizes": sorted(f.stat().st_size for f in files), "disk_bytes": sum(f.stat().st_size for f in files),
            "pixel_bytes": n * pool[0].nbytes, "base_anon_kb": base, "peak_anon_kb": sampler.peak_anon}


def library_reader(mode: str, path: Path):
    """(frames, read(lo, hi) -> (hi - lo, H, W), close) through a format's own library."""
    if mode == "pylibCZIrw":
        from pylibCZIrw import czi as pyczi

        reader = pyczi.CziReader(str(path))
        n = reader.total_bounding_box["T"][1]
        rect = reader.total_bounding_rectangle

        def read(lo: int, hi: int) -> np.ndarray:
            out = np.empty((hi - lo, rect.h, rect.w), np.uint16)
            for i, t in enumerate(range(lo, hi)):
                out[i] = reader.read(plane={"T": t, "Z": 0, "C": 0})[..., 0]
            return out

        return n, read, reader.close
    if mode == "ndtiff":
        import ndtiff

        ds = ndtiff.Dataset(str(path))
        n = len(ds.axes["time"])
        first = ds.read_image(time=0)

        def read(lo: int, hi: int) -> np.ndarray:
            out = np.empty((hi - lo, *first.shape), first.dtype)
            for i, t in enumerate(range(lo, hi)):
                out[i] = ds.read_image(time=t)
            return out

        return n, read, ds.close
    import tifffile

    tif = tifffile.TiffFile(path)
    return len(tif.pages), lambda lo, hi: tif.asarray(key=range(lo, hi)), tif.close


def child_read(spec: dict) -> dict:
    """Read a file end to end in blocks as infer does; open and read seconds, checksum, RssAnon peaks."""
    import ndtiff  # noqa: F401  (every reader's libraries imported before the baseline is read)
    import pylibCZIrw.czi  # noqa: F401
    import tifffile  # noqa: F401

    from decode_mem.io import open_stack, prefetch
    from decode_mem.io.blocks import edge_blocks

    path, block, mode = Path(spec["path"]), int(spec["block"]), spec["mode"]
    base = proc_status_kb()["RssAnon"]
    sampler = PeakSampler()
    sampler.start()
    t0 = time.perf_counter()
    if mode == "stack":
        stack = open_stack(path)
        n, backend, close = len(stack), stack.backend, stack.close
        blocks = stack.blocks(block, context=1)
    else:
        n, read, close = library_reader(mode, path)
        backend = mode
        blocks = edge_blocks(read, n, block, context=1)
    t_open = time.perf_counter()
    opened = proc_status_kb()["RssAnon"]
    checksum, frames, nbytes = 0, 0, 0
    for _, data in prefetch(blocks, depth=int(spec["depth"])):
        core = data[1:-1]  # the block's own frames; one context frame each side
        checksum += int(core.sum(dtype=np.uint64))
        frames += len(core)
        nbytes += core.nbytes
    t_end = time.perf_counter()
    close()
    sampler.stop()
    return {"open_s": t_open - t0, "read_s": t_end - t_open, "seconds": t_end - t0, "frames": frames,
            "bytes": nbytes, "checksum": checksum, "backend": backend, "base_anon_kb": base, "open_anon_kb": opened,
            "peak_anon_kb": sampler.peak_anon, "peak_file_kb": sampler.peak_file}


def child_infer(spec: dict) -> dict:
    """predict_stack over a frame range of a stack with 'auto' sizes; the whole process's peak RssAnon beside the
    plan it made, and the sampled peaks before the plan was made (choosing sizes: on a first run, timing candidates)
    and after it (the blocks)."""
    from decode_mem.infer import predict_stack
    from decode_mem.infer.ranges import FrameRange
    from decode_mem.io import open_stack
    from decode_mem.memory import measure_phase
    from decode_mem.model.checkpoint import load_model

    model = load_model(None, device="cpu")
    plans, phases = [], {}
    localizations = 0
    sampler = PeakSampler()

    def planned(choice: Any) -> None:  # the peak so far is the choosing's; the blocks' starts from here
        plans.append(choice)
        phases["choose_kb"], sampler.peak_anon = sampler.peak_anon, 0

    with open_stack(spec["path"]) as stack:
        view = FrameRange(stack, int(spec["start"]), int(spec["stop"]))
        start_anon = proc_status_kb()["RssAnon"]
        t0 = time.perf_counter()
        with measure_phase("infer", interval=0.002, device="cpu") as phase:
            sampler.start()
            for table in predict_stack(view, model, device="cpu", compile="auto", on_plan=planned):
                localizations += len(table)
            sampler.stop()
        seconds = time.perf_counter() - t0
        backend, n_stack, n_frames = stack.backend, len(stack), view.shape[0]
    choice = plans[0]
    return {"backend": backend, "stack_frames": n_stack, "frames": n_frames, "seconds": seconds,
            "localizations": localizations, "start_anon_mib": start_anon / 1024,
            "peak_anon_mib": phase.rss_anon_peak_mb, "sampled_peak_anon_mib": phase.rss_anon_mb,
            "hwm_exact": phase.hwm_exact, "choose_peak_anon_mib": phases["choose_kb"] / 1024,
            "blocks_peak_anon_mib": sampler.peak_anon / 1024, "plan_host_mib": choice.plan.host_bytes / MiB,
            "plan_blocks_mib": choice.plan.blocks_host_bytes / MiB, "plan_timed_mib": choice.plan.probe_bytes / MiB,
            "plan_baseline_mib": choice.plan.baseline_bytes / MiB, "sizes": choice.as_dict()}


def child_sample(spec: dict) -> dict:
    """Open a small real file and read every frame, ``repeat`` times; seconds of each repeat."""
    from decode_mem.io import open_stack

    times, frames, nbytes, shape, dtype, backend = [], 0, 0, None, None, None
    for _ in range(int(spec["repeat"])):
        t0 = time.perf_counter()
        with open_stack(spec["path"], **spec["options"]) as stack:
            frames, nbytes = 0, 0
            for _, data in stack.blocks(16, context=0):
                frames += len(data)
                nbytes += data.nbytes
            shape, dtype, backend = stack.shape, str(stack.dtype), stack.backend
        times.append(time.perf_counter() - t0)
    return {"seconds": times, "frames": frames, "bytes": nbytes, "shape": list(shape), "dtype": dtype,
            "backend": backend}


def run_child(spec: dict, work: Path, env: dict[str, str] | None = None) -> dict:
    """``spec`` in a fresh ``python bench_formats.py --child`` (its result through a file: ndtiff prints progress)."""
    result = work / "child_result.json"
    result.unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps({**spec, "result": str(result)})],
                          capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=ROOT)
    if proc.returncode != 0 or not result.is_file():
        raise RuntimeError(f"child {spec['op']} {spec.get('path', '')} failed:\n{proc.stderr[-3000:]}")
    return json.loads(result.read_text())


# -- the run (parent) --------------------------------------------------------------------------------------------

def make_pool(work: Path, frame: int, n: int) -> Path:
    """SMLM frames simulated with decode_mem's default physics at 1 emitter/µm² (a few dozen, cycled)."""
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.stack import simulate_stack

    path = work / "pool.tif"
    simulate_stack(SimulationConfig(frame_size=(frame, frame), density=1.0, margin=6.0), n, path, seed=0)
    return path


def measure_reads(files: dict[str, dict], size: str, args: argparse.Namespace, work: Path) -> list[dict]:
    rows = []
    for kind in FORMATS:
        for label, mode in READERS[kind]:
            for cold in (True, False):
                rows.append({"size": size, "format": kind, "reader": label, "mode": mode, "cold": cold,
                             "disk_mib": files[kind]["disk_bytes"] / MiB, "reps": []})
    for rep in range(args.repeat):
        for row in rows:
            dataset = Path(files[row["format"]]["dataset"])
            if row["cold"]:
                evict(dataset)
            cached = resident_mib(dataset)
            r = run_child({"op": "read", "path": str(dataset), "mode": row["mode"], "block": args.block,
                           "depth": args.depth}, work)
            r["cached_mib_before"] = cached
            row["reps"].append(r)
            print(f"[{rep + 1}/{args.repeat}] {size} {row['format']:6s} {row['reader']:38s} "
                  f"{'cold' if row['cold'] else 'warm'} open {r['open_s']:6.2f} s read {r['read_s']:7.2f} s "
                  f"{r['bytes'] / 1e6 / r['seconds']:6.0f} MB/s peak RssAnon {r['peak_anon_kb'] / 1024:5.0f} MiB",
                  flush=True)
    return rows


def plan_cli(frame: int, frames: int, env: dict[str, str]) -> dict:
    """What ``python -m decode_mem.plan`` prints for this frame size and frame count on the CPU, with the plan cache
    (``DECODE_MEM_CACHE``) the inference runs filled: the same timings, so the same choice."""
    cmd = [sys.executable, "-m", "decode_mem.plan", "--frame", str(frame), str(frame), "--frames", str(frames),
           "--device", "cpu"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, cwd=ROOT)
    text = (proc.stdout + proc.stderr).strip()
    found = re.search(r"predicted peak host RssAnon: (\d+(?:\.\d+)?) MiB", text)
    sizes = re.search(r"chunk_size (\d+), batch_size (\d+), block (\d+) frames", text)
    return {"command": "python -m decode_mem.plan " + " ".join(cmd[3:]), "returncode": proc.returncode,
            "text": text, "host_mib": float(found.group(1)) if found else None,
            "sizes": [int(x) for x in sizes.groups()] if sizes else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size_gb", "--size-gb", type=float, default=8.0, help="GiB of pixels in the large files")
    p.add_argument("--small_gb", "--small-gb", type=float, default=1.0, help="GiB of pixels in the small files")
    p.add_argument("--frame", type=int, default=512, help="frame side in px (uint16 frames)")
    p.add_argument("--pool", type=int, default=32, help="distinct simulated frames, cycled")
    p.add_argument("--block", type=int, default=None,
                   help="frames per block (default: what infer reads on a CPU, tiling.block_length)")
    p.add_argument("--depth", type=int, default=1, help="blocks read ahead (infer's executor reads one ahead)")
    p.add_argument("--repeat", type=int, default=2, help="runs per read measurement")
    p.add_argument("--infer_frames", "--infer-frames", type=int, default=128, help="frames of the infer range")
    p.add_argument("--workdir", type=Path, default=Path(__file__).parent / "scratch" / "formats")
    p.add_argument("--out", type=Path, default=RESULTS / "formats.md")
    p.add_argument("--keep", action="store_true", help="keep the scratch data")
    p.add_argument("--render", type=Path, help="write the report again from a run's JSON (nothing measured)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        Path(spec["result"]).write_text(json.dumps(child(spec)))
        return 0
    if args.render:
        res = json.loads(args.render.read_text())
        args.pool = res.get("pool", args.pool)
        write_report(res, args)
        print(f"wrote {args.out} (+ .json, .png) from {args.render}")
        return 0
    problem = check_args(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    args.command = command_line(argv)
    from decode_mem.tiling.blocks import CPU_BLOCK_PIXELS, block_length

    if args.block is None:
        args.block = block_length((args.frame, args.frame), 2, "auto", max_pixels=CPU_BLOCK_PIXELS)
    t_all, load_start, at = time.perf_counter(), load_average(), commit()
    frame_bytes = args.frame * args.frame * 2
    sizes = {"small": int(np.ceil(args.small_gb * GiB / frame_bytes)),
             "large": int(np.ceil(args.size_gb * GiB / frame_bytes))}
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    result: dict = {"command": args.command, "commit": at, "block": args.block, "depth": args.depth, "pool": args.pool,
                    "frame": args.frame, "frames": sizes, "writes": [], "reads": [], "infer": [], "samples": [],
                    "plan_cli": {}}
    try:
        t0 = time.perf_counter()
        pool = make_pool(work, args.frame, args.pool)
        result["pool_seconds"] = time.perf_counter() - t0
        for label, rel, options in SAMPLES:
            path = ROOT / "tests" / "data" / "vendor" / rel
            r = run_child({"op": "sample", "path": str(path), "options": options, "repeat": SAMPLE_REPEATS}, work)
            result["samples"].append({"label": label, "file": rel, "options": options,
                                      "disk_bytes": sum(f.stat().st_size for f in files_of(path)), **r})
            print(f"sample {label}: {r['frames']} frames {r['shape']} {r['dtype']}, median "
                  f"{np.median(r['seconds']) * 1e3:.1f} ms", flush=True)
        for size, n in sizes.items():
            folder = work / size
            folder.mkdir(exist_ok=True)
            files = {}
            for kind in FORMATS:
                target = folder / {"czi": "movie.czi", "ndtiff": "movie_ndtiff", "tiff": "movie.tif"}[kind]
                files[kind] = run_child({"op": "write", "kind": kind, "path": str(target), "frames": n,
                                         "pool": str(pool)}, work)
                w = files[kind]
                result["writes"].append({"size": size, "format": kind, "frames": n, **w})
                print(f"wrote {size} {kind}: {n} frames, {w['disk_bytes'] / GiB:.2f} GiB in {w['files']} file(s), "
                      f"{w['seconds']:.0f} s, writer peak RssAnon {w['peak_anon_kb'] / 1024:.0f} MiB", flush=True)
            result["reads"] += measure_reads(files, size, args, work)
            if size == "large":
                start = (n // 2) // args.block * args.block
                stop = min(n, start + args.infer_frames)
                for kind in FORMATS:  # each with an empty plan cache of its own, as on a new machine; TIFF: control
                    env = {"DECODE_MEM_CACHE": str(work / f"plan_cache_{kind}" / "throughput.json"),
                           "MALLOC_ARENA_MAX": "1"}
                    for run in ("first", "repeat"):
                        r = run_child({"op": "infer", "path": files[kind]["dataset"], "start": start, "stop": stop},
                                      work, env=env)
                        result["infer"].append({"format": kind, "run": run, "start": start, "stop": stop, **r})
                        print(f"infer {kind} ({run} run) frames {start}..{stop - 1}: peak RssAnon "
                              f"{r['peak_anon_mib']:.0f} MiB, plan {r['plan_host_mib']:.0f} MiB, {r['seconds']:.0f} s",
                              flush=True)
                    result["plan_cli"][kind] = plan_cli(args.frame, stop - start, env)
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
        result["total_s"] = time.perf_counter() - t_all
        result["machine"] = machine_info(load_start, at)
        write_report(result, args)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out} (+ .json, .png)")
    return 0


def check_args(args: argparse.Namespace) -> str | None:
    """The first problem with the options, or None (checked before anything is written)."""
    if not 0 < args.small_gb <= args.size_gb:
        return f"--small_gb {args.small_gb} and --size_gb {args.size_gb}: need 0 < small_gb <= size_gb"
    if args.frame < 64 or args.pool < 1 or args.repeat < 1 or args.infer_frames < 1 or args.depth < 0:
        return "--frame must be >= 64 px, --pool, --repeat and --infer_frames >= 1, --depth >= 0"
    if args.block is not None and args.block < 1:
        return f"--block {args.block}: need at least 1 frame"
    free = shutil.disk_usage(args.workdir if args.workdir.exists() else args.workdir.parent
                             if args.workdir.parent.exists() else Path(".")).free
    need = 3.1 * args.size_gb * GiB + 2 * GiB
    if free < need:
        return f"{args.workdir}: {free / GiB:.1f} GiB free, the large files need about {need / GiB:.1f} GiB"
    return None


def machine_info(load_start: float, at: str) -> dict:
    import nd2
    import pylibCZIrw
    import readlif
    import sif_parser
    import tifffile

    meminfo = Path("/proc/meminfo").read_text().splitlines()
    mem_kb = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal"))
    return {"line": machine_line(f"torch threads: the reads use none, infer torch's default ({os.cpu_count()})",
                                 load_start=load_start, at=at),
            "cpu": cpu_name(), "ram_gib": mem_kb / 2**20, "os": platform.platform(),
            "versions": {"numpy": np.__version__, "tifffile": tifffile.__version__,
                         "pylibCZIrw": getattr(pylibCZIrw, "__version__", None) or version("pylibCZIrw"),
                         "ndtiff": version("ndtiff"), "nd2": nd2.__version__,
                         "readlif": getattr(readlif, "__version__", None) or version("readlif"),
                         "sif_parser": getattr(sif_parser, "__version__", None) or version("sif_parser")}}


# -- report ------------------------------------------------------------------------------------------------------

def med(values: list[float]) -> float:
    return float(np.median(values))


def mbps(row: dict) -> float:
    """Median MB/s of frames delivered (10^6 bytes / s, open included)."""
    return row["reps"][0]["bytes"] / 1e6 / med([r["seconds"] for r in row["reps"]])


def peak_mib(row: dict) -> float:
    return max(r["peak_anon_kb"] for r in row["reps"]) / 1024


def above_mib(row: dict, key: str = "peak_anon_kb") -> float:
    return max(r[key] - r["base_anon_kb"] for r in row["reps"]) / 1024


def find(rows: list[dict], size: str, fmt: str, mode: str, cold: bool) -> dict:
    return next(r for r in rows if r["size"] == size and r["format"] == fmt and r["mode"] == mode
                and r["cold"] == cold)


def write_report(res: dict, args: argparse.Namespace) -> None:
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    m, rows = res["machine"], res["reads"]
    gib = {s: n * res["frame"] ** 2 * 2 / GiB for s, n in res["frames"].items()}
    writes = ["| size | format | frames | image files | on disk GiB | write s | write MB/s | writer peak RssAnon MiB "
              "(above its start) |", "|" + "---|" * 8]
    for w in res["writes"]:
        writes.append(f"| {gib[w['size']]:.2f} GiB | {FORMAT_NAMES[w['format']]} | {w['frames']} | {w['image_files']} "
                      f"| {w['disk_bytes'] / GiB:.2f} | {w['seconds']:.0f} "
                      f"| {w['pixel_bytes'] / 1e6 / w['seconds']:.0f} "
                      f"| {w['peak_anon_kb'] / 1024:.0f} ({(w['peak_anon_kb'] - w['base_anon_kb']) / 1024:.0f}) |")
    rollover = ", ".join(f"{w['image_files']} image file(s) + NDTiff.index (sizes "
                         f"{', '.join(f'{b / GiB:.2f}' for b in w['file_sizes'])} GiB)"
                         for w in res["writes"] if w["format"] == "ndtiff")
    reads = ["| size | format | reader | page cache before | open s (median) | read s (median, min-max) | MB/s "
             "(median) | peak RssAnon MiB (max) | above baseline MiB | of which after open | peak RssFile MiB |",
             "|" + "---|" * 11]
    for r in rows:
        cache = "cold" if r["cold"] else "warm"
        resident = [x["cached_mib_before"] for x in r["reps"] if x["cached_mib_before"] is not None]
        if resident:
            cache += f" ({min(resident):.0f}-{max(resident):.0f} MiB resident)"
        secs = sorted(x["read_s"] for x in r["reps"])
        reads.append(f"| {gib[r['size']]:.2f} GiB | {r['format']} | {r['reader']} | {cache} "
                     f"| {med([x['open_s'] for x in r['reps']]):.2f} | {med(secs):.1f} ({secs[0]:.1f}-{secs[-1]:.1f}) "
                     f"| {mbps(r):.0f} | {peak_mib(r):.0f} | {above_mib(r):.0f} | {above_mib(r, 'open_anon_kb'):.0f} "
                     f"| {max(x['peak_file_kb'] for x in r['reps']) / 1024:.0f} |")
    kept = [x["cached_mib_before"] / r["disk_mib"] for r in rows if r["size"] == "large" and not r["cold"]
            for x in r["reps"] if x["cached_mib_before"] is not None]
    kept = f"between {min(kept):.0%} and {max(kept):.0%} of the file" if kept else "an unknown share (no fincore)"
    sums = {s: {x["checksum"] for r in rows if r["size"] == s for x in r["reps"]} for s in res["frames"]}
    frames_read = {s: {x["frames"] for r in rows if r["size"] == s for x in r["reps"]} for s in res["frames"]}
    check = "; ".join(f"{gib[s]:.2f} GiB: {'all equal' if len(v) == 1 else f'{len(v)} different values'} "
                      f"({sum(len(r['reps']) for r in rows if r['size'] == s)} runs, frames "
                      f"{', '.join(str(f) for f in sorted(frames_read[s]))} of {res['frames'][s]})"
                      for s, v in sums.items())
    samples = ["| file (tests/data/vendor) | options | on disk KiB | backend | frames (T, H, W), dtype "
               f"| open + read ms (median of {SAMPLE_REPEATS}, min-max) | MB/s |", "|" + "---|" * 7]
    for s in res["samples"]:
        t = sorted(s["seconds"])
        opts = ", ".join(f"{k}={v}" for k, v in s["options"].items()) or "–"
        samples.append(f"| {s['label']}: {s['file']} | {opts} | {s['disk_bytes'] / 1024:.0f} | {s['backend']} "
                       f"| {tuple(s['shape'])}, {s['dtype']} | {med(t) * 1e3:.1f} ({t[0] * 1e3:.1f}-{t[-1] * 1e3:.1f}) "
                       f"| {s['bytes'] / 1e6 / med(t):.1f} |")
    text = f"""# Microscope formats streamed: CZI and NDTiff of {gib['large']:.3g} GiB against TIFF

Command: `{res['command']}` ({res['total_s'] / 60:.0f} min in all; simulating the frame pool
{res['pool_seconds']:.0f} s).

Machine: {m['line']}; {m['ram_gib']:.1f} GiB RAM, {m['os']}. Whatever else ran (the load averages above, on
{os.cpu_count()} cores) stretches the times, so they vary between repeats (see min-max); memory peaks do not depend on
it.
Versions: {', '.join(f'{k} {v}' for k, v in m['versions'].items())}.

{__doc__.split(chr(10) + chr(10), 2)[2].split(chr(10) + "Scratch data")[0].strip()}

Data: {res['frame']}x{res['frame']} uint16 frames, {args.pool} distinct frames simulated by decode_mem at 1 emitter/µm²
(baseline, Poisson noise, blurred spots) and cycled: {res['frames']['small']} frames ({gib['small']:.2f} GiB of pixels)
and {res['frames']['large']} frames ({gib['large']:.2f} GiB). Blocks of {res['block']} frames (+ 1 context frame each
side, so {res['block'] + 2} frames are read per {res['block']} delivered), {res['depth']} block(s) read ahead.
MB/s = bytes of the frames delivered / (open + read) seconds (10^6 bytes); "above baseline" subtracts RssAnon after
importing numpy, tifffile, pylibCZIrw, ndtiff and decode_mem; "of which after open" is RssAnon once the file is open
and before the first frame is read, above that baseline.

## Writing (each file in a subprocess of its own, frame by frame)

{chr(10).join(writes)}

NDTiff: ndtiff starts a new file at 4 GiB: the datasets hold {rollover}.

## Reading end to end

{chr(10).join(reads)}

Checksums (uint64 sum of every frame delivered) of all runs over one size, in every format and reader: {check}.

![peak RssAnon and read speed](formats.png)

{read_summary(res, gib)}

## infer on a frame range of the {gib['large']:.3g} GiB files

{infer_section(res)}

## Real samples (small files: opening dominates)

{chr(10).join(samples)}

These files are a few hundred KB: their MB/s measure the cost of opening a file (parsing its header, index and
metadata), not a read speed. The first repeat also imports the format's library; the median leaves it out.

## Not measured

- Files larger than RAM ({m['ram_gib']:.0f} GiB here). The "warm" rows read what the page cache kept of a file after
  its cold run: at {gib['large']:.2f} GiB {kept} on this shared machine (the "page cache before" column); "cold" rows
  read this VM's virtual disk, which the host may cache in turn.
- ND2, LIF and SIF at size: only the small real samples (no writer library for them here; SIF frames are a memmap,
  ND2 and LIF are read plane by plane as CZI is). Compressed CZI (JPEG XR / zstd subblocks), multi-scene,
  multi-channel and tiled (mosaic) CZI, multi-position NDTiff, and NDTiff written by Micro-Manager itself (this one
  is written by its ndtiff library, the same format).
- The `infer` command on these files (it takes no frame range; the library path above reads them through the same
  `open_stack`, `FrameRange` and `predict_stack` that `infer` and its dask workers use), `--follow`, dask workers,
  the napari plugin, a GPU.
- Other block lengths and read-ahead depths; random access.
"""
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    plot(res, gib, out.with_suffix(".png"))


def read_summary(res: dict, gib: dict[str, float]) -> str:
    """The comparisons the table supports, computed from it."""
    rows = res["reads"]
    lines = ["What the table shows (computed from it; peaks: the max over repeats, MB/s: medians):"]
    for fmt in FORMATS:
        small, large = find(rows, "small", fmt, "stack", True), find(rows, "large", fmt, "stack", True)
        lines.append(f"- {FORMAT_NAMES[fmt]} through open_stack: peak RssAnon {peak_mib(small):.0f} MiB for "
                     f"{gib['small']:.2f} GiB, {peak_mib(large):.0f} MiB for {gib['large']:.2f} GiB "
                     f"({above_mib(small):.0f} vs {above_mib(large):.0f} MiB above the baseline; after opening "
                     f"{above_mib(small, 'open_anon_kb'):.0f} vs {above_mib(large, 'open_anon_kb'):.0f} MiB).")
    for size in ("small", "large"):
        ref_cold, ref_warm = find(rows, size, "tiff", "tifffile", True), find(rows, size, "tiff", "tifffile", False)
        parts = []
        for fmt in FORMATS:
            for label, mode in READERS[fmt]:
                if mode == "tifffile":
                    continue
                cold, warm = find(rows, size, fmt, mode, True), find(rows, size, fmt, mode, False)
                parts.append(f"{fmt} {label} {mbps(cold):.0f} cold / {mbps(warm):.0f} warm "
                             f"({mbps(cold) / mbps(ref_cold):.2f}x / {mbps(warm) / mbps(ref_warm):.2f}x)")
        lines.append(f"- Read MB/s at {gib[size]:.2f} GiB, against tifffile on the same frames "
                     f"({mbps(ref_cold):.0f} cold / {mbps(ref_warm):.0f} warm): " + "; ".join(parts) + ".")
    for fmt, mode in (("czi", "stack"), ("czi", "pylibCZIrw"), ("ndtiff", "stack"), ("ndtiff", "ndtiff"),
                      ("tiff", "stack"), ("tiff", "tifffile")):
        s, big = find(rows, "small", fmt, mode, False), find(rows, "large", fmt, mode, False)
        per = [med([x["read_s"] for x in r["reps"]]) / r["reps"][0]["frames"] * 1e3 for r in (s, big)]
        opens = [med([x["open_s"] for x in r["reps"]]) for r in (s, big)]
        lines.append(f"- Length ({res['frames']['small']} -> {res['frames']['large']} frames), warm, {fmt} "
                     f"{mode}: {per[0]:.2f} -> {per[1]:.2f} ms of reading per frame delivered, open {opens[0]:.2f} "
                     f"-> {opens[1]:.2f} s.")
    return "\n".join(lines) + "\n\n" + READERS_AT_LENGTH


READERS_AT_LENGTH = """What the readers do at length (the causes were found by profiling outside this run; the sizes are
in the lines above):
- CZI: the time per frame grows with the number of frames in the file in pylibCZIrw's own reads as much as through
  `open_stack`, so the cost is libCZI's: its tile accessor (`CziReader.read`, the only pixel read pylibCZIrw 6.1
  offers) searches the file's whole subblock directory for each plane it composes, so the time per plane grows with
  the planes in the file and a whole movie's read time faster than its length. decode_mem's CZI reader cannot avoid
  it through pylibCZIrw; a reader that reads each plane's subblock by its directory entry would.
- NDTiff: `open_stack` spends its open time in `decode_mem.io._ndtiff`: `Selection.key` finds each image's time
  point with `list.index` over all time points, twice per image (time in the square of the images), and the index
  is kept as Python lists of one dict and several numbers per image (RssAnon after opening grows with the images,
  the "of which after open" column; the module docstring says "small arrays"). ndtiff's own reader opens the same
  dataset faster (the open column). Reading the pixels (`os.pread` at the index's offsets) is not the slow part
  (compare the ms of reading per frame of both NDTiff lines above)."""


def infer_section(res: dict) -> str:
    if not res["infer"]:
        return "Not measured."
    rows = ["| file | run | frames | chunk, batch, block, amp, compile | s | frames/s | localizations | peak RssAnon "
            "MiB | while choosing sizes | while computing blocks | its plan MiB (baseline) | peak / its plan "
            "| its plan while computing blocks, MiB | blocks' peak / that | timed candidates' term MiB | plan CLI MiB "
            "| peak / plan CLI | within its plan + 15 % |",
            "|" + "---|" * 18]
    verdicts = []
    for r in res["infer"]:
        s, cli = r["sizes"], res["plan_cli"].get(r["format"], {}).get("host_mib")
        ratio = r["peak_anon_mib"] / r["plan_host_mib"]
        ok = ratio <= GOAL
        blocks_plan = r.get("plan_blocks_mib", r["plan_host_mib"])  # a JSON from before the term was planned
        timed_text = f"{r['plan_timed_mib']:.0f}" if "plan_timed_mib" in r else "n/a"
        cli_text = (f"{cli:.0f}", f"{r['peak_anon_mib'] / cli:.3f}") if cli else ("n/a", "n/a")
        verdicts.append(f"{r['format']} {r['run']} run {'met' if ok else '**not met**'} ({ratio:.3f}x its plan)")
        rows.append(f"| {r['format']} ({r['backend']}, {r['stack_frames']} frames) | {r['run']} "
                    f"| {r['start']}..{r['stop'] - 1} | {s['chunk_size']}, {s['batch_size']}, {s['block']}, "
                    f"{s['amp']}, {s.get('compile')} | {r['seconds']:.0f} | {r['frames'] / r['seconds']:.2f} "
                    f"| {r['localizations']} | {r['peak_anon_mib']:.0f} | {r['choose_peak_anon_mib']:.0f} "
                    f"| {r['blocks_peak_anon_mib']:.0f} | {r['plan_host_mib']:.0f} ({r['plan_baseline_mib']:.0f}) "
                    f"| {ratio:.3f} | {blocks_plan:.0f} | {r['blocks_peak_anon_mib'] / blocks_plan:.3f} "
                    f"| {timed_text} | {cli_text[0]} "
                    f"| {cli_text[1]} | {'yes' if ok else '**no**'} |")
    reasons = "\n".join(f"- {r['format']} {r['run']} run: {r['sizes']['reason']}" for r in res["infer"])
    clis = []
    for kind, c in res["plan_cli"].items():
        repeat = next(r for r in res["infer"] if r["format"] == kind and r["run"] == "repeat")["sizes"]
        same = c["sizes"] == [repeat["chunk_size"], repeat["batch_size"], repeat["block"]]
        clis.append(f"`{c['command']}` with the {kind} runs' plan cache (exit {c['returncode']}; the same chunk, "
                    f"batch and block as the {kind} repeat run: {'yes' if same else '**no**'}):\n\n```\n"
                    f"{c['text']}\n```")
    control = {r["run"]: r for r in res["infer"] if r["format"] == "tiff"}
    against = [f"{r['format']} {r['run']} {r['peak_anon_mib'] - control[r['run']]['peak_anon_mib']:+.0f} MiB"
               for r in res["infer"] if r["format"] != "tiff" and r["run"] in control]
    missed = [r for r in res["infer"] if r["peak_anon_mib"] / r["plan_host_mib"] > GOAL]
    why = ""
    if missed:
        def name(r: dict) -> str:
            return f"{r['format']} {r['run']}"

        choosing = [r for r in missed if r["choose_peak_anon_mib"] >= r["blocks_peak_anon_mib"]]
        computing = [r for r in missed if r not in choosing]
        parts = []
        if choosing:
            parts.append(f"{len(choosing)} peaked while choosing sizes ({', '.join(map(name, choosing))}: "
                         "timing candidates in the process, whose largest the plan counts as its timed_candidates "
                         "term; a repeat run times them too where its budget lets a candidate not timed yet fit, its "
                         "reason's count of timed settings)")
        if computing:
            parts.append(f"{len(computing)} while computing blocks ({', '.join(map(name, computing))}; up to "
                         f"{max(r['blocks_peak_anon_mib'] / r['plan_host_mib'] for r in computing):.3f}x the plan)")
        tiff = [r for r in res["infer"] if r["format"] == "tiff"]
        control = {r["run"]: r in missed for r in tiff}  # per kind of run (first, repeat): the control missed it?
        readers = [r for r in missed if r["format"] != "tiff"]
        plans = [r for r in readers if control.get(r["run"])]
        own = [r for r in readers if not control.get(r["run"])]
        verdict = "; ".join(
            [f"where the TIFF control's run of the same kind misses it too ({', '.join(map(name, plans))}) the "
             "excess is the plan's on this machine, not the reader's"] * bool(plans)
            + [f"where the control's run of the same kind meets it ({', '.join(map(name, own))}) compare the "
               "difference to the control above"] * bool(own)) or "only the TIFF control misses it"
        why = (f"\n\nNot met in {len(missed)} of {len(res['infer'])} runs: " + "; ".join(parts) + ". The TIFF "
               "control's peaks are " + ", ".join(f"{r['peak_anon_mib'] / r['plan_host_mib']:.3f}x" for r in tiff)
               + f" its plans: {verdict}.")
    return f"""`predict_stack(FrameRange(open_stack(file), start, stop), load_model(), device="cpu", compile="auto")`
with sizes 'auto', in a fresh process with `MALLOC_ARENA_MAX=1`, twice per file: first with an empty plan cache
(`DECODE_MEM_CACHE`, one per file: the candidates are timed in this process, as on a new machine's first run),
then again with the sizes remembered. The TIFF of the same frames is the control. Peak RssAnon: the whole
process (model, open file and all), the larger of 2 ms samples and the reset VmHWM less the file-backed pages;
"while choosing sizes" and "while computing blocks": 2 ms samples before and after the run made its plan.
"Its plan": the prediction the run made for itself (`on_plan`, `InferencePlan.host_bytes`, with its own baseline
RssAnon); "plan CLI": what the plan command printed from the same cache after the runs (its baseline is its own
process's, which has not opened the file).

{chr(10).join(rows)}

Peak RssAnon against the TIFF control's run of the same kind: {', '.join(against) or 'n/a'}.

Goal (peak within its plan + 15 %): {'; '.join(verdicts)}.{why}

Why these sizes (the runs' own words):
{reasons}

{chr(10).join(clis)}"""


def plot(res: dict, gib: dict[str, float], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["reads"]
    combos = [(fmt, label, mode) for fmt in FORMATS for label, mode in READERS[fmt]]
    names = [f"{fmt}: {label}" for fmt, label, _ in combos]
    y = np.arange(len(combos))
    fig, axes = plt.subplots(1, 3, figsize=(17, 0.5 * len(combos) + 2.8),
                             gridspec_kw={"width_ratios": [1, 1.2, 1.1]})
    a, b, c = axes
    h = 0.38
    for k, (size, color) in enumerate((("small", "tab:green"), ("large", "tab:blue"))):
        a.barh(y + (k - 0.5) * h, [peak_mib(find(rows, size, f, m, True)) for f, _, m in combos], h, color=color,
               label=f"{gib[size]:.2f} GiB")
    a.set_xlabel("peak RssAnon, MiB (cold runs; max over repeats)")
    a.set_yticks(y, names, fontsize=8)
    a.invert_yaxis()
    a.legend(fontsize=8)
    a.set_title(f"memory: the same at {gib['small']:.2f} and {gib['large']:.2f} GiB?", fontsize=10)
    q = 0.2
    for k, (size, cold, color) in enumerate((("small", True, "#9bd49b"), ("small", False, "tab:green"),
                                             ("large", True, "#9cc3e6"), ("large", False, "tab:blue"))):
        b.barh(y + (k - 1.5) * q, [mbps(find(rows, size, f, m, cold)) for f, _, m in combos], q, color=color,
               label=f"{gib[size]:.2f} GiB {'cold' if cold else 'warm'}")
    b.set_xlabel("read MB/s (frames delivered / wall time, median)")
    b.set_yticks(y, [""] * len(combos))
    b.invert_yaxis()
    b.legend(fontsize=8)
    b.set_title("read speed (machine shared: 2 busy cores)", fontsize=10)
    if res["infer"]:
        x = np.arange(len(res["infer"]))
        c.bar(x - 0.2, [r["peak_anon_mib"] for r in res["infer"]], 0.4, color="tab:red", label="measured peak")
        c.bar(x + 0.2, [r["plan_host_mib"] for r in res["infer"]], 0.4, color="tab:gray", label="its plan")
        c.scatter(x + 0.2, [r["plan_host_mib"] * GOAL for r in res["infer"]], marker="_", s=500, color="black",
                  label="plan + 15 %", zorder=3)
        c.set_xticks(x, [f"{r['format']}\n{r['run']} run" for r in res["infer"]], fontsize=8)
        c.set_ylabel("RssAnon, MiB")
        c.set_ylim(0, 1.35 * max(max(r["peak_anon_mib"], r["plan_host_mib"] * GOAL) for r in res["infer"]))
        c.legend(fontsize=8, loc="upper left", ncol=2)
    c.set_title(f"infer on a frame range of the {gib['large']:.3g} GiB files", fontsize=10)
    fig.suptitle(f"{res['frame']}x{res['frame']} uint16 movies written by libCZI, ndtiff and tifffile, read through "
                 "decode_mem's open_stack and the formats' own libraries", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
