"""Benchmark the big-stack simulator: wall time, frames/s and peak host memory (RssAnon) against stack length.

    python benchmarks/bench_simulate.py                      # 2 000 and 20 000 frames of 256x256, ~6 min
    python benchmarks/bench_simulate.py --frames 200 2000    # quicker

Each measurement runs in a fresh child process (so peaks do not carry over): it calls the CLI's library
function ``simulate_stack`` (TIFF + ThunderSTORM CSV into benchmarks/scratch/, deleted afterwards) while a
background thread samples ``/proc/self/status`` RssAnon every 20 ms, and the time inside
``MovieSimulator.block`` is summed to split simulating from writing. Also measured: torch's default thread
count against 1 thread, and the training dataset's sample rate.
Writes benchmarks/results/simulate.md and simulate.png.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from command_line import command_line
from machine import machine_line

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SCRATCH = ROOT / "benchmarks" / "scratch" / "simulate"
RESULTS = ROOT / "benchmarks" / "results"
STATUS_KEYS = ("RssAnon", "RssFile", "VmRSS", "VmHWM")


def read_status() -> dict[str, float]:
    """MB values of RssAnon, RssFile, VmRSS, VmHWM from /proc/self/status (Linux)."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in STATUS_KEYS:
                out[key] = int(rest.split()[0]) / 1024.0  # kB -> MB
    return out


class Sampler(threading.Thread):
    """Samples RssAnon every ``interval`` s until stopped; keeps (t, MB) pairs and the peak."""

    def __init__(self, interval: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.samples: list[tuple[float, float]] = []
        self._stop_event = threading.Event()
        self._t0 = time.perf_counter()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.samples.append((time.perf_counter() - self._t0, read_status()["RssAnon"]))
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.samples.append((time.perf_counter() - self._t0, read_status()["RssAnon"]))

    @property
    def peak(self) -> float:
        return max(v for _, v in self.samples)


# ---- child: one measurement ----------------------------------------------------------------------------------
def child(args: argparse.Namespace) -> dict:
    import torch

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    from decode_mem.simulate import MovieSimulator, SimulationConfig, simulate_stack
    from decode_mem.simulate.movie import MovieBlock

    config = SimulationConfig(frame_size=tuple(args.size), density=args.density)
    args.workdir.mkdir(parents=True, exist_ok=True)
    out, gt = args.workdir / f"stack_{args.child}.tif", args.workdir / f"gt_{args.child}.csv"
    # time spent simulating (emitters, rendering, noise) inside the run; the rest of the wall time is writing
    sim_seconds = [0.0]
    original_block = MovieSimulator.block

    def timed_block(self: MovieSimulator, t0: int, t1: int) -> MovieBlock:
        t = time.perf_counter()
        try:
            return original_block(self, t0, t1)
        finally:
            sim_seconds[0] += time.perf_counter() - t

    MovieSimulator.block = timed_block
    base = read_status()
    sampler = Sampler()
    sampler.start()
    start = time.perf_counter()
    result = simulate_stack(config, args.child, out, gt, seed=0, block=args.block)
    wall = time.perf_counter() - start
    sampler.stop()
    end = read_status()
    rows, block = result.n_localizations, result.block
    return {
        "frames": args.child, "threads": torch.get_num_threads(), "wall_s": wall,
        "simulate_s": sim_seconds[0],
        "fps": args.child / wall, "rows": rows, "block": block,
        "base_rss_anon_mb": base["RssAnon"], "peak_rss_anon_mb": sampler.peak, "vm_hwm_mb": end["VmHWM"],
        "tif_bytes": out.stat().st_size if out.exists() else 0, "csv_bytes": gt.stat().st_size if gt.exists() else 0,
        "timeline": sampler.samples[:: max(1, len(sampler.samples) // 400)],
    }


def profile(args: argparse.Namespace, frames: int = 300, top: int = 6) -> dict:
    """Where the time of ``simulate_stack`` goes: cProfile of ``frames`` frames (1 thread), the ``top``
    functions by their own time, as shares of the profiled total."""
    import cProfile
    import pstats

    import torch

    torch.set_num_threads(1)
    from decode_mem.simulate import SimulationConfig, simulate_stack

    config = SimulationConfig(frame_size=tuple(args.size), density=args.density)
    args.workdir.mkdir(parents=True, exist_ok=True)
    out, gt = args.workdir / "stack_profile.tif", args.workdir / "gt_profile.csv"
    profiler = cProfile.Profile()
    profiler.runcall(simulate_stack, config, frames, out, gt, seed=0, block=args.block)
    stats = pstats.Stats(profiler).stats  # {(file, line, name): (calls, ncalls, tottime, cumtime, callers)}
    total = sum(v[2] for v in stats.values())
    rows = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    for f in (out, gt):
        f.unlink(missing_ok=True)
    return {"frames": frames, "total_s": total,
            "top": [{"function": f"{Path(k[0]).name}:{k[1]}({k[2]})", "share": v[2] / total} for k, v in rows]}


def dataset_rate(size: tuple[int, int]) -> dict:
    """Samples/s of SimulatedDataset (one process) and of simulate_batch (B = 32), default config."""
    import torch

    from decode_mem.simulate import SimulatedDataset, SimulationConfig, simulate_batch

    torch.set_num_threads(1)
    config = SimulationConfig(frame_size=size)
    it = iter(SimulatedDataset(config, seed=0))
    next(it)
    n = 300
    t = time.perf_counter()
    for _ in range(n):
        next(it)
    per_sample = (time.perf_counter() - t) / n
    gen = torch.Generator().manual_seed(0)
    simulate_batch(config, 32, gen)
    t = time.perf_counter()
    for _ in range(10):
        simulate_batch(config, 32, gen)
    per_batch = (time.perf_counter() - t) / 10
    return {"size": list(size), "dataset_samples_per_s": 1 / per_sample, "batch32_samples_per_s": 32 / per_batch}


# ---- parent --------------------------------------------------------------------------------------------------
def run_child(frames: int, args: argparse.Namespace, threads: int) -> dict:
    cmd = [sys.executable, __file__, "--child", str(frames), "--threads", str(threads),
           "--size", *map(str, args.size), "--density", str(args.density), "--workdir", str(args.workdir)]
    if args.block:
        cmd += ["--block", str(args.block)]
    print("$", " ".join(cmd[1:]), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"child failed: {' '.join(cmd)}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"  {frames} frames: {result['fps']:.1f} frames/s, peak RssAnon {result['peak_rss_anon_mb']:.0f} MB"
          f" (start {result['base_rss_anon_mb']:.0f} MB)", flush=True)
    for name in ("stack", "gt"):
        for f in args.workdir.glob(f"{name}_{frames}.*"):
            f.unlink()
    return result


def machine() -> dict:
    import numpy
    import tifffile
    import torch
    import zarr

    with open("/proc/meminfo") as fh:
        mem_gb = int(fh.readline().split()[1]) / 1024**2
    return {"line": machine_line(f"torch's default {torch.get_num_threads()} threads"), "mem_gb": mem_gb,
            "torch_default_threads": torch.get_num_threads(), "numpy": numpy.__version__,
            "tifffile": tifffile.__version__, "zarr": zarr.__version__, "cuda": torch.cuda.is_available()}


def write_report(runs: list[dict], rate: dict, prof: dict, info: dict, args: argparse.Namespace,
                 load: tuple) -> None:
    h, w = args.size
    lines = [
        "# Big-stack simulation: speed and host memory vs stack length",
        "",
        f"Command: `{args.command}`",
        "",
        f"Machine: {info['line']}; {info['mem_gb']:.0f} GB RAM, CUDA: {info['cuda']}; "
        f"load average {load[0]:.1f} / {load[1]:.1f} (1 / 5 min) at the start, {load[2]:.1f} at the end. "
        f"numpy {info['numpy']}, tifffile {info['tifffile']}, zarr {info['zarr']}.",
        "",
        f"What runs: `simulate_stack(SimulationConfig(frame_size=({h}, {w}), density={args.density}), N, "
        "stack.tif, gt.csv, seed=0)` — the library call behind `python -m decode_mem.simulate` — with the "
        "defaults otherwise (challenge-like EMCCD, 2D Gaussian PSF σ = 1 px, 5000 ± 1500 photons, on-time 2 "
        "frames, bg 100 photons/px, margin 3 px). Each row is a fresh process; RssAnon is sampled every 20 ms "
        "by a background thread; 'start' is RssAnon after imports, before the call. 'Of which simulating' is "
        "the time spent inside `MovieSimulator.block` (emitters, rendering, camera noise); the rest of the wall "
        "time is writing (uint16 conversion, TIFF pages, CSV rows).",
        "",
        "| frames | torch threads | block | wall (s) | of which simulating (s) | frames/s | GT rows | TIFF (MB) "
        "| CSV (MB) | RssAnon start (MB) | RssAnon peak (MB) | peak − start (MB) | VmHWM (MB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['frames']} | {r['threads']} | {r['block']} | {r['wall_s']:.1f} | {r['simulate_s']:.1f} | "
            f"{r['fps']:.1f} | "
            f"{r['rows']} | {r['tif_bytes'] / 1e6:.0f} | {r['csv_bytes'] / 1e6:.0f} | {r['base_rss_anon_mb']:.0f} | "
            f"{r['peak_rss_anon_mb']:.0f} | {r['peak_rss_anon_mb'] - r['base_rss_anon_mb']:.0f} | "
            f"{r['vm_hwm_mb']:.0f} |")
    writes = [r for r in runs if r.get("role") == "length"]
    if len(writes) >= 2:
        small, big = writes[0], writes[-1]
        grow = (big["peak_rss_anon_mb"] - big["base_rss_anon_mb"]) - (small["peak_rss_anon_mb"]
                                                                       - small["base_rss_anon_mb"])
        lines += ["", f"Peak RssAnon above start: {small['peak_rss_anon_mb'] - small['base_rss_anon_mb']:.0f} MB for "
                  f"{small['frames']} frames, {big['peak_rss_anon_mb'] - big['base_rss_anon_mb']:.0f} MB for "
                  f"{big['frames']} frames ({big['frames'] // small['frames']}× longer; difference {grow:+.0f} MB), "
                  f"while the TIFF grows from {small['tif_bytes'] / 1e6:.0f} to {big['tif_bytes'] / 1e6:.0f} MB: "
                  "memory is set by the block, not by the stack length. See simulate.png."]
    lines += [
        "",
        f"Training samples (`SimulatedDataset`, default config {rate['size'][0]}×{rate['size'][1]}, one process, "
        f"1 thread): {rate['dataset_samples_per_s']:.0f} samples/s one by one; `simulate_batch` with B = 32: "
        f"{rate['batch32_samples_per_s']:.0f} samples/s.",
        "",
        "Notes:",
        "",
        *notes(runs, args),
        f"- Where the time goes (cProfile of `simulate_stack` on {prof['frames']} frames of {h}×{w}, 1 thread, "
        f"{prof['total_s']:.1f} s profiled; the functions with the most time of their own): "
        + "; ".join(f"`{t['function']}` {100 * t['share']:.0f} %" for t in prof["top"]) + ".",
        "",
        "Not measured here: " + ("" if info["cuda"] else "CUDA (no GPU on this machine), ")
        + "zarr output, sCMOS noise and the astigmatic PSF (larger patches), `--bg-mode smooth`, DataLoader "
        f"workers, and stacks bigger than {max(r['tif_bytes'] for r in runs) / 1e9:.1f} GB (BigTIFF is used above "
        "3.9 GB; only tested on a tiny stack with a lowered threshold).",
    ]
    (RESULTS / "simulate.md").write_text("\n".join(lines) + "\n")


def notes(runs: list[dict], args: argparse.Namespace) -> list[str]:
    """Sentences computed from the measured rows."""
    out = []
    for r in runs:
        if r.get("role") == "length":
            out.append(f"- {r['frames']} frames: {100 * r['simulate_s'] / r['wall_s']:.0f} % of the wall time "
                       f"simulating, {100 * (1 - r['simulate_s'] / r['wall_s']):.0f} % writing.")
    pair = [r for r in runs if r.get("role") == "threads"]
    one = next((r for r in pair if r["threads"] == 1), None)
    default = next((r for r in pair if r["threads"] != 1), None)
    if one and default:
        out.append(f"- torch's default here is {default['threads']} threads: {default['fps']:.0f} frames/s against "
                   f"{one['fps']:.0f} with 1 thread ({one['fps'] / default['fps']:.1f}× in favour of 1 thread) at "
                   f"{one['frames']} frames, measured back to back (load average above). Why was not measured "
                   "here; `python -m decode_mem.simulate --threads 1` is the faster setting on this machine.")
    return out


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        t = [s[0] for s in r["timeline"]]
        v = [s[1] for s in r["timeline"]]
        total = max(t[-1], 1e-9)
        ax.plot([x / total for x in t], v, label=f"{r['frames']} frames, {r['threads']} thread(s) "
                                                  f"({r['wall_s']:.0f} s, TIFF {r['tif_bytes'] / 1e9:.2f} GB)")
    ax.set_xlabel("fraction of the run")
    ax.set_ylabel("RssAnon (MB)")
    ax.set_ylim(bottom=0)
    ax.set_title("simulate_stack: host memory (RssAnon) while writing")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, nargs="+", default=[2000, 20000])
    p.add_argument("--size", type=int, nargs=2, default=[256, 256])
    p.add_argument("--density", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=1, help="torch threads for the main runs (0: torch default)")
    p.add_argument("--block", type=int, default=None)
    p.add_argument("--workdir", type=Path, default=DEFAULT_SCRATCH, help="scratch folder, deleted at the end")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    p.add_argument("--rate", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.command = command_line()
    if args.child is not None:
        print(json.dumps(child(args)))
        return
    if args.rate:
        print(json.dumps(dataset_rate((64, 64))))
        return
    if args.profile:
        print(json.dumps(profile(args)))
        return
    load0 = os.getloadavg()
    info = machine()
    runs = [{**run_child(n, args, args.threads), "role": "length"} for n in sorted(args.frames)]
    pair = min(500, min(args.frames))  # 1 thread vs torch's default thread count, back to back
    runs += [{**run_child(pair, args, threads), "role": "threads"} for threads in (1, 0)]
    proc = subprocess.run([sys.executable, __file__, "--rate"], capture_output=True, text=True, cwd=ROOT, check=True)
    rate = json.loads(proc.stdout.strip().splitlines()[-1])
    cmd = [sys.executable, __file__, "--profile", "--size", *map(str, args.size), "--density", str(args.density),
           "--workdir", str(args.workdir)] + (["--block", str(args.block)] if args.block else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True)
    prof = json.loads(proc.stdout.strip().splitlines()[-1])
    load1 = os.getloadavg()
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_report(runs, rate, prof, info, args, (load0[0], load0[1], load1[0]))
    plot(runs, RESULTS / "simulate.png")
    shutil.rmtree(args.workdir, ignore_errors=True)
    print(f"wrote {RESULTS / 'simulate.md'} and simulate.png")


if __name__ == "__main__":
    main()
