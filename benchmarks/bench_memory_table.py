"""The memory requirement table: measured peaks beside the planner's predictions, and the defaults re-measured.

    python benchmarks/bench_memory_table.py                 # CPU: benchmarks/results/memory_table.md + .png
    python benchmarks/bench_memory_table.py --device cuda   # adds device peaks (torch.cuda.max_memory_allocated)
    python benchmarks/bench_memory_table.py --part defaults --out /tmp/defaults.md   # one part, elsewhere

1. **Planner vs measured** (``predict_stack`` with the shipped model, fresh process per row, 1 torch thread):
   frame size × tile core (``chunk_size``) × batch × precision; peak host RssAnon (the larger of RssAnon sampled
   every 2 ms and VmHWM, reset at the start, less the file-backed pages: a peak between samples is not missed;
   on CUDA also the device peak) beside ``decode_mem.plan``'s prediction for the same settings, and the relative
   error.
2. **The defaults** (``python -m decode_mem.infer STACK --out DIR`` with no size flags, 3-frame uint16 stacks, the
   user's command): peak RssAnon of the process (sampled from /proc every 10 ms), wall time and the sizes the
   planner chose (read from ``<stem>.json``).

Training memory is measured by ``bench_train_memory.py``; the planner does not predict training memory yet.
Every number comes from the run that wrote the report.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_throughput import timed

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FRAMES = (512, 1024, 2048)
CHUNKS = (256, 512)
BATCHES = (1, 4)
PRECISIONS = ("off", "bf16")
DEFAULT_SIZES = (1024, 2048, 4096)

WORKER = """
import json, sys, torch
torch.set_num_threads(1)
from decode_mem.io import open_stack
from decode_mem.infer import predict_stack
from decode_mem.memory import measure_phase
from decode_mem.model.checkpoint import load_model
import decode_mem.infer.runner  # noqa: F401  (what a real run has imported)
a = json.loads(sys.argv[1])
model = load_model(a["model"], device=a["device"])
plans = []
with open_stack(a["stack"]) as stack:
    if a["device"] == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with measure_phase("run", interval=0.002, device="cpu") as phase:  # host only: CUDA is read below
        for _ in predict_stack(stack, model, chunk_size=a["chunk"], batch_size=a["batch"], amp=a["amp"],
                               device=a["device"], compile=False, on_plan=plans.append):
            pass
out = {"peak_mb": phase.rss_anon_peak_mb, "sampled_peak_mb": phase.rss_anon_mb, "hwm_exact": phase.hwm_exact,
       "predicted_mb": plans[0].plan.host_bytes / 2**20}
if a["device"] == "cuda":
    out["device_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    out["device_predicted_mb"] = plans[0].plan.device_bytes / 2**20
print(json.dumps(out))
"""


def stack(path: Path, size: int, frames: int = 3) -> Path:
    import tifffile

    rng = np.random.default_rng(0)
    tifffile.imwrite(path, (100 + rng.poisson(50, (frames, size, size))).astype(np.uint16), photometric="minisblack")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--model", default=str(ROOT / "data" / "models" / "default_2d.pt"))
    p.add_argument("--out", default=str(RESULTS / "memory_table.md"))
    p.add_argument("--frames", type=int, nargs="+", default=list(FRAMES), help="frame sides of the grid (px)")
    p.add_argument("--part", choices=("all", "grid", "defaults"), default="all",
                   help="measure both parts (default) or one; the report says which part was not measured")
    args = p.parse_args(argv)
    grid, defaults = [], []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_memory_table_") as tmp:
        work = Path(tmp)
        for size in args.frames if args.part != "defaults" else ():
            path = stack(work / f"s{size}.tif", size)
            for chunk in CHUNKS:
                for batch in BATCHES:
                    for amp in PRECISIONS:
                        spec = {"model": args.model, "stack": str(path), "chunk": chunk, "batch": batch, "amp": amp,
                                "device": args.device}
                        done = subprocess.run([sys.executable, "-c", WORKER, json.dumps(spec)], cwd=ROOT,
                                              capture_output=True, text=True)
                        if done.returncode != 0:
                            raise RuntimeError(done.stderr[-2000:])
                        r = json.loads(done.stdout.strip().splitlines()[-1])
                        grid.append({"frame": size, "chunk": chunk, "batch": batch, "amp": amp, **r})
                        print(grid[-1], flush=True)
        for size in DEFAULT_SIZES if args.part != "grid" else ():
            path = stack(work / f"d{size}.tif", size)
            out = work / f"out{size}"
            seconds, peak, _ = timed([sys.executable, "-m", "decode_mem.infer", str(path), "--out", str(out),
                                      "--model", args.model, "--device", args.device, "--quiet"])
            summary = json.loads((out / f"d{size}.json").read_text())
            defaults.append({"frame": size, "seconds": seconds, "peak_mb": peak, "sizes": summary.get("sizes", {})})
            print(defaults[-1], flush=True)
    write_report(Path(args.out), grid, defaults, args, time.perf_counter() - t_all)
    return 0


def write_report(out: Path, grid: list[dict], defaults: list[dict], args: argparse.Namespace, total: float) -> None:
    import torch

    from decode_mem.io.atomic import atomic_output

    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True,
                         text=True).stdout.strip() or platform.machine()
    errors = [abs(r["predicted_mb"] / r["peak_mb"] - 1) for r in grid]
    part = "" if args.part == "all" else f" --part {args.part}"
    if list(args.frames) != list(FRAMES):
        part += " --frames " + " ".join(str(f) for f in args.frames)
    lines = ["# Memory requirement table", "",
             f"Command: `python benchmarks/bench_memory_table.py --device {args.device}{part}`; {total / 60:.1f} min. "
             f"Machine: {cpu}; torch {torch.__version__}, python {platform.python_version()}.", "",
             __doc__.split("\n\n", 2)[2].strip(), "",
             "## Planner vs measured (3 frames per stack)", ""]
    if not grid:
        lines += ["Not measured in this run (`--part defaults`)."]
    else:
        lines += ["| frame | tile core | batch | precision | measured peak RssAnon (MiB) | predicted (MiB) | error |"
                  + (" device peak (MiB) | device predicted (MiB) |" if args.device == "cuda" else ""),
                  "|---|---|---|---|---|---|---|" + ("---|---|" if args.device == "cuda" else "")]
        for r in grid:
            err = r["predicted_mb"] / r["peak_mb"] - 1
            row = (f"| {r['frame']}² | {r['chunk']} | {r['batch']} | {'fp32' if r['amp'] == 'off' else r['amp']} "
                   f"| {r['peak_mb']:.0f} | {r['predicted_mb']:.0f} | {err:+.0%} |")
            if args.device == "cuda":
                row += f" {r['device_peak_mb']:.0f} | {r['device_predicted_mb']:.0f} |"
            lines.append(row)
        within10 = sum(e <= 0.10 for e in errors)
        under = sum(r["predicted_mb"] < r["peak_mb"] for r in grid)
        exact = sum(bool(r.get("hwm_exact")) for r in grid)
        lines += ["", f"Prediction error: median {np.median(errors):.0%}, largest {max(errors):.0%}; within 10 % in "
                  f"{within10} of {len(errors)} rows; the run needed more than predicted in {under} of {len(grid)} "
                  f"rows. VmHWM could be reset (a peak between samples counted) in {exact} of {len(grid)} rows."]
    lines += ["", "## The defaults (no size flags), the whole command", ""]
    if not defaults:
        lines += ["Not measured in this run (`--part grid`)."]
    else:
        lines += ["| frame | peak RssAnon (MiB) | wall (s) | chosen chunk | chosen batch | budget (MiB) |",
                  "|---|---|---|---|---|---|"]
    for d in defaults:
        s = d["sizes"]
        lines.append(f"| {d['frame']}² | {d['peak_mb']:.0f} | {d['seconds']:.1f} | {s.get('chunk_size', '?')} "
                     f"| {s.get('batch_size', '?')} | {s.get('budget_mib', '?')} |")
    if args.device == "cpu":
        lines += ["", "GPU rows: **not measured** — no CUDA device in this run."]
    if grid:
        png = out.with_suffix(".png")
        _plot(grid, png)
        lines += ["", f"![planner vs measured]({png.name})", ""]
    with atomic_output(out) as tmp:
        tmp.write_text("\n".join(lines))
    print(f"wrote {out}")


def _plot(grid: list[dict], png: Path) -> None:
    from matplotlib.figure import Figure

    from decode_mem.io.atomic import atomic_output

    fig = Figure(figsize=(6, 4.5), layout="constrained")
    ax = fig.subplots()
    measured = [r["peak_mb"] for r in grid]
    ax.scatter(measured, [r["predicted_mb"] for r in grid], c=[FRAMES.index(r["frame"]) for r in grid])
    lim = [0, max(measured + [r["predicted_mb"] for r in grid]) * 1.05]
    ax.plot(lim, lim, "k--", linewidth=1)
    ax.plot(lim, [v * 1.1 for v in lim], ":", color="0.5", linewidth=1)
    ax.plot(lim, [v * 0.9 for v in lim], ":", color="0.5", linewidth=1)
    ax.set(xlabel="measured peak RssAnon (MiB)", ylabel="predicted (MiB)", title="planner vs measured (±10 % dotted)")
    with atomic_output(png) as tmp:
        fig.savefig(tmp, dpi=100, format="png")


if __name__ == "__main__":
    raise SystemExit(main())
