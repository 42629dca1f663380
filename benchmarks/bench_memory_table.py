"""The memory requirement table: measured peaks beside the planner's predictions, and the defaults re-measured.

    python benchmarks/bench_memory_table.py                 # CPU: benchmarks/results/memory_table.md + .png
    python benchmarks/bench_memory_table.py --device cuda   # adds device peaks (torch.cuda.max_memory_allocated)
    python benchmarks/bench_memory_table.py --part defaults --out /tmp/defaults.md   # one part, elsewhere

1. **Planner vs measured** (``predict_stack`` with the shipped model, fresh process per row, 1 torch thread):
   frame size × tile core (``chunk_size``) × batch × precision; peak host RssAnon (the larger of RssAnon sampled
   every 2 ms and VmHWM, reset at the start, less the file-backed pages: a peak between samples is not missed;
   on CUDA also the device peak) beside ``decode_mem.plan``'s prediction for the same settings, and the relative
   error.
2. **Training, planner vs measured** (``decode_mem.train``'s ``fit`` with the default network, fresh process per
   row, 1 torch thread: two optimizer steps and one validation of 16 windows, simulated frames at density 1/µm²):
   frame size × crop (``--use_chunking --crop_size``) × batch; the peak as in part 1 (device peak on CUDA)
   beside the prediction the run itself wrote (``<out>/memory_plan.json``).
3. **The defaults** (``python -m decode_mem.infer STACK --out DIR`` with no size flags, 3-frame uint16 stacks, the
   user's command, with an empty plan cache as on a new user's first run, so its timed candidates count too):
   peak RssAnon of the process (sampled from /proc every 10 ms), wall time and the sizes the planner chose
   (read from ``<stem>.json``); and training's defaults, ``python -m decode_mem.train --out DIR
   --steps 2 --val_every 2`` (every size its default), measured the same way beside its own plan.

``bench_train_memory.py`` measures training memory over accumulation and precision as well (no predictions).
Every number comes from the run that wrote the report.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_throughput import timed
from command_line import command_line
from machine import load_average, machine_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FRAMES = (512, 1024, 2048)
CHUNKS = (256, 512)
BATCHES = (1, 4)
PRECISIONS = ("off", "bf16")
DEFAULT_SIZES = (1024, 2048, 4096)
TRAIN_ROWS = ((64, 2, 0), (64, 8, 0), (128, 2, 0), (128, 8, 0), (128, 8, 64), (256, 2, 64))  # frame, batch, crop

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


TRAIN_WORKER = """
import json, os, sys, torch
torch.set_num_threads(1)
from decode_mem.memory import measure_phase
from decode_mem.model.net import ModelConfig
from decode_mem.simulate.config import SimulationConfig
from decode_mem.train.config import TrainConfig
from decode_mem.train.loop import MEMORY_PLAN_FILE, fit
a = json.loads(sys.argv[1])
cfg = TrainConfig(out=a["out"], steps=2, batch_size=a["batch"], accumulation_steps=1, val_every=2, val_size=16,
                  use_chunking=a["chunk"] > 0, crop_size=a["chunk"] or 512, memory_tracking=False, quiet=True,
                  amp=a["amp"], device=a["device"], size_jitter=0,
                  simulation=SimulationConfig(frame_size=(a["frame"], a["frame"]), density=1.0), model=ModelConfig())
if a["device"] == "cuda":
    torch.cuda.reset_peak_memory_stats()
with measure_phase("run", interval=0.002, device="cpu") as phase:
    fit(cfg)
plan = json.load(open(os.path.join(a["out"], MEMORY_PLAN_FILE)))
out = {"peak_mb": phase.rss_anon_peak_mb, "hwm_exact": phase.hwm_exact, "predicted_mb": plan["predicted_host_mib"]}
if a["device"] == "cuda":
    out["device_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    out["device_predicted_mb"] = plan["predicted_device_mib"]
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
    p.add_argument("--part", choices=("all", "grid", "train", "defaults"), default="all",
                   help="measure every part (default) or one; the report says which parts were not measured")
    p.add_argument("--bf16_frames", type=int, nargs="*",
                   help="frame sides with bf16 rows (default: every side where bf16 is native or on CUDA; on a CPU "
                        "that emulates bf16 only the smallest, since a 2048² row takes minutes there and 'auto' "
                        "never picks it)")
    args = p.parse_args(argv)
    if args.bf16_frames is None:
        from decode_mem.model.precision import cpu_has_native_bf16

        native = args.device == "cuda" or cpu_has_native_bf16()
        args.bf16_frames = list(args.frames) if native else sorted(args.frames)[:1]
    grid, train, defaults, train_defaults = [], [], [], []
    t_all, load_start = time.perf_counter(), load_average()
    with tempfile.TemporaryDirectory(prefix="bench_memory_table_") as tmp:
        work = Path(tmp)
        for size in args.frames if args.part in ("all", "grid") else ():
            path = stack(work / f"s{size}.tif", size)
            for chunk in CHUNKS:
                for batch in BATCHES:
                    for amp in PRECISIONS:
                        if amp == "bf16" and size not in args.bf16_frames:
                            continue
                        spec = {"model": args.model, "stack": str(path), "chunk": chunk, "batch": batch, "amp": amp,
                                "device": args.device}
                        r = in_fresh_process(WORKER, spec)
                        grid.append({"frame": size, "chunk": chunk, "batch": batch, "amp": amp, **r})
                        print(grid[-1], flush=True)
        for size, batch, chunk in TRAIN_ROWS if args.part in ("all", "train") else ():
            spec = {"out": str(work / f"train{size}_{batch}_{chunk}"), "frame": size, "batch": batch, "chunk": chunk,
                    "amp": "off", "device": args.device}
            train.append({**spec, **in_fresh_process(TRAIN_WORKER, spec)})
            print(train[-1], flush=True)
        fresh = dict(os.environ, DECODE_MEM_CACHE=str(work / "plan_cache" / "throughput.json"))  # empty at first
        for size in DEFAULT_SIZES if args.part in ("all", "defaults") else ():
            path = stack(work / f"d{size}.tif", size)
            out = work / f"out{size}"
            seconds, peak, _ = timed([sys.executable, "-m", "decode_mem.infer", str(path), "--out", str(out),
                                      "--model", args.model, "--device", args.device, "--quiet"], env=fresh)
            summary = json.loads((out / f"d{size}.json").read_text())
            defaults.append({"frame": size, "seconds": seconds, "peak_mb": peak, "sizes": summary.get("sizes", {})})
            print(defaults[-1], flush=True)
        if args.part in ("all", "defaults"):
            out = work / "train_defaults"
            seconds, peak, _ = timed([sys.executable, "-m", "decode_mem.train", "--out", str(out), "--steps", "2",
                                      "--val_every", "2", "--device", args.device, "--quiet"])
            plan = json.loads((out / "memory_plan.json").read_text())
            train_defaults.append({"seconds": seconds, "peak_mb": peak, "plan": plan})
            print(train_defaults[-1], flush=True)
    write_report(Path(args.out), grid, train, defaults + train_defaults, args, time.perf_counter() - t_all,
                 load_start)
    return 0


def in_fresh_process(code: str, spec: dict) -> dict:
    """Run a worker script with ``spec`` in a fresh interpreter; its last stdout line, parsed."""
    done = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


WORKER_THREADS = "1 torch thread per worker process"  # each row's worker sets torch.set_num_threads(1)


def write_report(out: Path, grid: list[dict], train: list[dict], defaults: list[dict], args: argparse.Namespace,
                 total: float, load_start: float) -> None:
    from decode_mem.io.atomic import atomic_output

    command = command_line()
    lines = ["# Memory requirement table", "",
             f"Command: `{command}`; {total / 60:.1f} min. "
             f"Machine: {machine_line(WORKER_THREADS, load_start=load_start)} (another job on the machine "
             "slows the wall times, not the peaks).", "",
             __doc__.split("\n\n", 2)[2].strip(), "",
             "## Planner vs measured (3 frames per stack)", ""]
    lines += _comparison(grid, "tile core", args.device)
    skipped = [f for f in args.frames if f not in args.bf16_frames]
    if grid and skipped:
        from decode_mem.model.precision import cpu_has_native_bf16

        why = ("" if args.device == "cuda" or cpu_has_native_bf16() else
               ": this CPU has no native bf16, torch emulates it (minutes per row) and `--amp auto` runs fp32 here")
        lines += ["", f"bf16 rows at {', '.join(f'{f}²' for f in skipped)}: **not measured** (`--bf16_frames`){why}."]
    lines += ["", "## Training, planner vs measured (2 steps and a validation)", ""]
    lines += _comparison(train, "crop", args.device)
    lines += ["", "## The defaults (no size flags), the whole command", ""]
    if not defaults:
        lines += ["Not measured in this run (`--part` chose other parts)."]
    else:
        lines += ["| frame | peak RssAnon (MiB) | wall (s) | chosen chunk | chosen batch | budget (MiB) |",
                  "|---|---|---|---|---|---|"]
    for d in (d for d in defaults if "sizes" in d):
        s = d["sizes"]
        lines.append(f"| {d['frame']}² | {d['peak_mb']:.0f} | {d['seconds']:.1f} | {s.get('chunk_size', '?')} "
                     f"| {s.get('batch_size', '?')} | {s.get('budget_mib', '?')} |")
    for d in (d for d in defaults if "plan" in d):
        p = d["plan"]
        shape = "x".join(str(v) for v in p["frame_shape"])
        lines += ["", f"Training (`python -m decode_mem.train --out DIR --steps 2 --val_every 2`, every size its "
                  f"default: batch {p['batch_size']} × accumulation {p['accumulation_steps']}, {shape} px frames, "
                  f"validation of {p['val_size']} windows): peak RssAnon {d['peak_mb']:.0f} MiB, wall "
                  f"{d['seconds']:.1f} s; its plan predicted {p['predicted_host_mib']:.0f} MiB."]
    if args.device == "cpu":
        lines += ["", "GPU rows: **not measured** — no CUDA device in this run."]
    if grid or train:
        png = out.with_suffix(".png")
        _plot(grid, train, png)
        lines += ["", f"![planner vs measured]({png.name})", ""]
    with atomic_output(out) as tmp:
        tmp.write_text("\n".join(lines))
    print(f"wrote {out}")


def _comparison(rows: list[dict], size_name: str, device: str) -> list[str]:
    """The table of measured and predicted peaks and its error summary (``chunk`` is the tile core or the
    training crop, 0 for whole frames)."""
    if not rows:
        return ["Not measured in this run (`--part` chose other parts)."]
    cuda = device == "cuda"
    lines = [f"| frame | {size_name} | batch | precision | measured peak RssAnon (MiB) | predicted (MiB) | error |"
             + (" device peak (MiB) | device predicted (MiB) |" if cuda else ""),
             "|---|---|---|---|---|---|---|" + ("---|---|" if cuda else "")]
    for r in rows:
        err = r["predicted_mb"] / r["peak_mb"] - 1
        row = (f"| {r['frame']}² | {r['chunk'] or 'whole frames'} | {r['batch']} "
               f"| {'fp32' if r['amp'] == 'off' else r['amp']} | {r['peak_mb']:.0f} | {r['predicted_mb']:.0f} "
               f"| {err:+.0%} |")
        if cuda:
            row += f" {r['device_peak_mb']:.0f} | {r['device_predicted_mb']:.0f} |"
        lines.append(row)
    errors = [abs(r["predicted_mb"] / r["peak_mb"] - 1) for r in rows]
    within10 = sum(e <= 0.10 for e in errors)
    under = sum(r["predicted_mb"] < r["peak_mb"] for r in rows)
    exact = sum(bool(r.get("hwm_exact")) for r in rows)
    return [*lines, "", f"Prediction error: median {np.median(errors):.0%}, largest {max(errors):.0%}; within 10 % "
                    f"in {within10} of {len(rows)} rows; the run needed more than predicted in {under} of {len(rows)} "
                    f"rows. VmHWM could be reset (a peak between samples counted) in {exact} of {len(rows)} rows."]


def _plot(grid: list[dict], train: list[dict], png: Path) -> None:
    from matplotlib.figure import Figure

    from decode_mem.io.atomic import atomic_output

    fig = Figure(figsize=(6, 4.5), layout="constrained")
    ax = fig.subplots()
    for rows, marker, label in ((grid, "o", "inference"), (train, "s", "training")):
        if rows:
            ax.scatter([r["peak_mb"] for r in rows], [r["predicted_mb"] for r in rows], marker=marker, label=label)
    every = grid + train
    lim = [0, max([r["peak_mb"] for r in every] + [r["predicted_mb"] for r in every]) * 1.05]
    ax.plot(lim, lim, "k--", linewidth=1)
    ax.plot(lim, [v * 1.1 for v in lim], ":", color="0.5", linewidth=1)
    ax.plot(lim, [v * 0.9 for v in lim], ":", color="0.5", linewidth=1)
    ax.set(xlabel="measured peak RssAnon (MiB)", ylabel="predicted (MiB)", title="planner vs measured (±10 % dotted)")
    ax.legend(loc="upper left")
    with atomic_output(png) as tmp:
        fig.savefig(tmp, dpi=100, format="png")


if __name__ == "__main__":
    raise SystemExit(main())
