"""Batch inference over a folder of stacks: one process vs a dask LocalCluster of 2 worker processes.

    python benchmarks/bench_batch.py                 # 6 stacks x 500 x 64 x 64, shipped model, ~2-3 min on 2 cores
    python benchmarks/bench_batch.py --stacks 2 --frames 100 --out /tmp/batch.md    # smoke run

Stacks are simulated once (``decode_mem.simulate.simulate_stack``, EMCCD, density 1/µm², seeds 0..n-1) into a
temporary folder, then ``run_inference`` processes the folder twice, each time in a fresh subprocess:
``workers=0`` (this process, 1 torch thread) and ``workers=2`` (LocalCluster, 2 processes x 1 thread, one
dask task per 4096 frames: one task per stack here). Throughput = frames / wall time of the whole call (cluster
start-up included) and frames / time spent on the stacks (start-up excluded). Memory: peak RssAnon of the
process that ran the engine (single) or of each worker (dask), sampled after every block. Both runs'
CSVs are compared byte for byte. Writes benchmarks/results/batch.md.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from command_line import command_line
from machine import machine_line

RESULTS = Path(__file__).parent / "results"
MODEL = Path(__file__).resolve().parents[1] / "data" / "models" / "default_2d.pt"


def child(args: argparse.Namespace) -> None:
    from decode_mem.infer import InferConfig, run_inference

    report = run_inference(InferConfig(inputs=(args.input,), out=args.result_dir, model=str(MODEL), threads=1,
                                       workers=args.workers, report=False))
    single_peak = max((s.peak_rss_anon_mb or 0.0) for s in report.stacks)
    sizes = next((s.extra.get("sizes") for s in report.stacks if s.extra.get("sizes")), {})
    print(json.dumps({"wall_s": report.wall_s, "frames": report.frames, "failures": len(report.failures),
                      "sizes": {k: sizes.get(k) for k in ("chunk_size", "batch_size", "block")},
                      "stack_s": sum(s.wall_s for s in report.stacks),
                      "localizations": sum(s.localizations for s in report.stacks),
                      "worker_peaks": report.worker_peak_rss_anon_mb, "stack_peak": single_peak}))


def run_child(folder: Path, out: Path, workers: int) -> dict:
    cmd = [sys.executable, __file__, "--child", "--input", str(folder), "--result-dir", str(out),
           "--workers", str(workers)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def simulate(folder: Path, stacks: int, frames: int) -> float:
    import torch

    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.stack import simulate_stack

    torch.set_num_threads(1)
    t = time.perf_counter()
    for i in range(stacks):
        simulate_stack(SimulationConfig(frame_size=(64, 64), density=1.0), frames, folder / f"stack{i}.tif", seed=i)
    return time.perf_counter() - t


def machine() -> str:
    import dask
    import distributed
    import numpy as np
    import torch

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (not used)"
    return (f"Machine: {machine_line(torch.get_num_threads())}; {mem:.1f} GiB RAM, {platform.platform()}; "
            f"GPU: {gpu}. Versions: numpy {np.__version__}, dask {dask.__version__}, distributed "
            f"{distributed.__version__}.")


def report(cmd: str, stacks: int, frames: int, one: dict, two: dict, same: bool, sim_s: float) -> str:
    load = " / ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"
    def row(name: str, r: dict, peaks: str) -> str:
        return (f"| {name} | {r['wall_s']:.1f} | {r['frames'] / r['wall_s']:.0f} | {r['stack_s']:.1f} | "
                f"{r['frames'] / r['stack_s']:.0f} | {r['localizations']} | {peaks} |")

    w = two["worker_peaks"]
    worker_peaks = ", ".join(f"{v:.0f}" for _, v in sorted(w.items())) or "n/a"
    lines = [
        "# Batch inference: one process vs 2 dask workers", "",
        f"Command: `{cmd}`", "", machine(),
        f"Both runs were measured back to back in one invocation, 1 torch thread per process; load average at the "
        f"end: {load}.", "",
        f"Data: {stacks} simulated stacks of {frames} x 64 x 64 uint16 (EMCCD, density 1/µm², {sim_s:.0f} s to "
        f"simulate), the shipped model `data/models/default_2d.pt`, default ('auto') sizes — chosen here: chunk "
        f"{one['sizes'].get('chunk_size')}, batch {one['sizes'].get('batch_size')}, block {one['sizes'].get('block')},",
        "CSV output. 'stacks s' is the time spent on the stacks themselves (cluster start-up excluded).", "",
        "| run | wall s | frames/s (wall) | stacks s | frames/s (stacks) | localizations | peak RssAnon MiB |",
        "|---|---|---|---|---|---|---|",
        row("1 process", one, f"{one['stack_peak']:.0f} (the process)"),
        row("2 dask workers", two, f"{worker_peaks} (per worker)"),
        "",
        f"Speed-up (wall): {one['wall_s'] / two['wall_s']:.2f}x; on the stacks alone: "
        f"{one['stack_s'] / two['stack_s']:.2f}x. CSV files identical between the two runs: {'yes' if same else 'NO'}.",
        "",
        "The dask workers start without dask's `MALLOC_TRIM_THRESHOLD_` (`NO_MALLOC_TRIM` in "
        "`decode_mem.infer.dask_backend` says why).",
        "",
        "Not measured here: GPUs, more than 2 workers, `--scheduler` on a multi-machine cluster. The dask "
        "client's own memory is not in the table.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stacks", type=int, default=6)
    p.add_argument("--frames", type=int, default=500)
    p.add_argument("--out", default=str(RESULTS / "batch.md"))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--input", help=argparse.SUPPRESS)
    p.add_argument("--result-dir", help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return 0
    cmd = command_line(argv)
    with tempfile.TemporaryDirectory(prefix="bench_batch_") as tmp:
        folder = Path(tmp) / "stacks"
        folder.mkdir()
        sim_s = simulate(folder, args.stacks, args.frames)
        one = run_child(folder, Path(tmp) / "one", 0)
        two = run_child(folder, Path(tmp) / "two", 2)
        same = all(filecmp.cmp(f, Path(tmp) / "two" / f.name, shallow=False) for f in (Path(tmp) / "one").glob("*.csv"))
    text = report(cmd, args.stacks, args.frames, one, two, same, sim_s)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
