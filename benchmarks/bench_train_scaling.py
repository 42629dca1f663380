"""Data-parallel training: steps/s and peak memory for 1 and N processes under torchrun, same global batch.

    python benchmarks/bench_train_scaling.py                 # CPU (gloo): 1 and 2 processes
    python benchmarks/bench_train_scaling.py --device cuda   # GPUs (NCCL): 1 .. number of GPUs

Each run is ``python -m decode_mem.train`` (under ``python -m torch.distributed.run --standalone`` for N > 1)
with the global batch split over the processes (``--batch_size global/N``), so every run trains the same model.
Speed: optimizer steps per second from the training log's ``time_s`` between the first logged step and the last
(start-up, simulation warm-up and the first step excluded). Memory: peak RssAnon (and, on CUDA, peak NVML /
allocated) of each rank, from its MemoryTracker CSV (rank 0: memory.csv, rank r: memory_rank<r>.csv).
CPU threads per process: cores // N, so N processes share the same cores. Writes
benchmarks/results/train_scaling.md and .png; every number comes from this run.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from command_line import command_line
from machine import machine_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def run(procs: int, args: argparse.Namespace, out: Path) -> dict:
    threads = max(1, (os.cpu_count() or 1) // procs) if args.device == "cpu" else 1
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}"]
                if procs > 1 else [sys.executable])
    cmd = [*launcher, "-m", "decode_mem.train", "--preset", args.preset, "--frame_size", "40", "40",
           "--batch_size", str(args.global_batch // procs), "--steps", str(args.steps), "--val_every", "100000",
           "--log_every", "1", "--device", args.device, "--threads", str(threads), "--quiet", "--out", str(out)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{procs} process(es) failed: {done.stderr[-2000:]}")
    with open(out / "train_log.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["loss"]]
    t = [float(r["time_s"]) for r in rows]
    steps_per_s = (len(t) - 1) / (t[-1] - t[0])
    peaks = []
    for rank in range(procs):
        name = "memory.csv" if rank == 0 else f"memory_rank{rank}.csv"
        with open(out / name, newline="") as fh:
            mem = list(csv.DictReader(fh))
        peak = {k: max((float(r[k]) for r in mem if r.get(k) not in (None, "", "nan")), default=float("nan"))
                for k in ("rss_anon_mb", "cuda_allocated_mb", "nvml_used_mb")}
        peaks.append(peak)
    return {"procs": procs, "threads": threads, "batch": args.global_batch // procs, "steps_per_s": steps_per_s,
            "wall_s": wall, "peaks": peaks}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--procs", type=int, nargs="+", help="process counts (default: 1 2 on CPU, 1..GPUs on CUDA)")
    p.add_argument("--preset", default="small", choices=["tiny", "small", "default"])
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--out", default=str(RESULTS / "train_scaling.md"))
    args = p.parse_args(argv)
    args.command = command_line(argv)

    import torch

    if args.procs:
        procs = args.procs
    elif args.device == "cuda":
        procs = list(range(1, torch.cuda.device_count() + 1))
    else:
        procs = [1, 2]
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_train_scaling_") as tmp:
        for n in procs:
            results.append(run(n, args, Path(tmp) / f"p{n}"))
            print(f"{n} process(es): {results[-1]['steps_per_s']:.3f} steps/s", flush=True)
    write_report(Path(args.out), results, args)
    return 0


def write_report(out: Path, results: list[dict], args: argparse.Namespace) -> None:
    import torch
    from matplotlib.figure import Figure

    from decode_mem.io.atomic import atomic_output

    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else None
    lines = ["# Data-parallel training scaling", "",
             f"Command: `{args.command}`. Device: {args.device}. "
             f"Machine: {machine_line('threads per process in the table', gpu=gpu)}.", "",
             __doc__.split("\n\n", 2)[2].strip(), "",
             "| processes | threads each | batch per process | steps/s | speed-up | peak RssAnon per rank (MiB) "
             "| peak CUDA allocated per rank (MiB) | wall incl. start-up (s) |", "|---|---|---|---|---|---|---|---|"]
    base = results[0]["steps_per_s"]
    for r in results:
        rss = ", ".join(f"{p['rss_anon_mb']:.0f}" for p in r["peaks"])
        cuda = ", ".join("–" if p["cuda_allocated_mb"] != p["cuda_allocated_mb"] else f"{p['cuda_allocated_mb']:.0f}"
                         for p in r["peaks"])
        lines.append(f"| {r['procs']} | {r['threads']} | {r['batch']} | {r['steps_per_s']:.3f} "
                     f"| {r['steps_per_s'] / base:.2f}x | {rss} | {cuda} | {r['wall_s']:.1f} |")
    if args.device == "cpu":
        lines += ["", "GPU rows: **not measured** — no CUDA device in this run (`--device cuda` on a machine with "
                  "GPUs adds them)."]
    png = out.with_suffix(".png")
    fig = Figure(figsize=(6, 3.5), layout="constrained")
    ax = fig.subplots()
    ax.plot([r["procs"] for r in results], [r["steps_per_s"] for r in results], "o-")
    ax.set(xlabel="processes", ylabel="optimizer steps / s", title=f"same global batch {args.global_batch}")
    ax.grid(alpha=0.3)
    with atomic_output(png) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    lines += ["", f"![scaling]({png.name})", ""]
    with atomic_output(out) as tmp:
        tmp.write_text("\n".join(lines))
    print(f"wrote {out} and {png}")


if __name__ == "__main__":
    raise SystemExit(main())
