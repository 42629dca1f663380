"""Does ``torch.compile`` pay on this CPU? ``predict_stack`` on a 64² and a 256² movie with ``compile`` off and on.

    python benchmarks/bench_compile.py            # benchmarks/results/compile.md + .png

Each run is a fresh process (the default torch threads, sizes chosen by ``auto`` and remembered by a first
run that is not timed). The time of every block is recorded (``on_block``): the first block carries the
compiling, the steady state is the median time per frame of the full blocks after it. Compiled runs twice with
an inductor cache of their own (``TORCHINDUCTOR_CACHE_DIR``): **cold**, the first compile on a machine, and
**warm**, a later run of the same shapes that finds the compiled kernels on disk. From these: the compile cost
(first block compiled − not), the steady-state speed-up and the break-even movie length, the number of frames
from which compiling repays its cost, and the same in network input pixels (frames × tiles × tile area, halos
included) — what ``predict.COMPILE_MIN_WORK`` (the pixels from which ``compile='auto'`` compiles on a CPU) should
follow. **Same emitters**: the compiled and the plain outputs
matched within 10 nm (Jaccard, RMSE). Every number comes from the run that wrote the report.
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
from command_line import command_line
from machine import machine_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MODES = ("off", "cold", "warm")  # not compiled; compiled with an empty inductor cache; compiled again

WORKER = """
import json, sys, time
import numpy as np
import torch
from decode_mem.infer import predict_stack
from decode_mem.infer.predict import COMPILE_MIN_WORK
from decode_mem.io import open_stack
from decode_mem.io.table import EmitterTable
from decode_mem.model.checkpoint import load_model
a = json.loads(sys.argv[1])
model = load_model(a["model"])
marks, plans = [], []
with open_stack(a["movie"]) as stack:
    t0 = time.perf_counter()
    table = EmitterTable.concat(predict_stack(stack, model, compile=a["compile"], on_plan=plans.append,
                                              on_block=lambda r: marks.append((time.perf_counter(), r.n_frames))))
    total = time.perf_counter() - t0
np.savez(a["table"], **{name: table[name] for name in table.names})
print(json.dumps({"total_s": total, "block_end_s": [m[0] - t0 for m in marks], "block_frames": [m[1] for m in marks],
                  "chunk": plans[0].plan.chunk_size, "batch": plans[0].plan.batch_size,
                  "tiles": plans[0].plan.n_tiles, "work_px": plans[0].plan.work_px_per_frame,
                  "threads": torch.get_num_threads(), "torch": torch.__version__,
                  "min_work": COMPILE_MIN_WORK}))
"""


def run(spec: dict, inductor_cache: Path) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache)}
    done = subprocess.run([sys.executable, "-c", WORKER, json.dumps(spec)], cwd=ROOT, capture_output=True, text=True,
                          env=env)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarize(r: dict) -> dict:
    """First block's seconds and the steady state: median s/frame of the full blocks after the first."""
    ends, frames = np.array(r["block_end_s"]), np.array(r["block_frames"])
    per_frame = np.diff(ends) / frames[1:]
    full = per_frame[frames[1:] == frames[0]] if len(per_frame) else per_frame
    return {"first_s": float(ends[0]), "first_frames": int(frames[0]), "steady_s_per_frame": float(np.median(full)),
            "blocks": len(frames), "total_s": r["total_s"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 256], help="frame sides (px), a movie each")
    p.add_argument("--frames", type=int, default=400)
    p.add_argument("--model", default=str(ROOT / "data" / "models" / "default_2d.pt"))
    p.add_argument("--out", default=str(RESULTS / "compile.md"))
    args = p.parse_args(argv)
    args.command = command_line(argv)
    from decode_mem.evaluate.metrics import evaluate
    from decode_mem.io.table import EmitterTable
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.stack import simulate_stack

    t_all = time.perf_counter()
    results, same = {}, {}
    with tempfile.TemporaryDirectory(prefix="bench_compile_") as tmp:
        work = Path(tmp)
        for size in args.sizes:
            movie = work / f"movie{size}.tif"
            simulate_stack(SimulationConfig(frame_size=(size, size), density=1.0, margin=6.0), args.frames, movie,
                           seed=1)
            spec = {"model": args.model, "movie": str(movie)}
            cache = work / f"inductor{size}"
            run({**spec, "compile": False, "table": str(work / "first.npz")}, cache)  # sizes chosen, untimed
            tables = {}
            for mode in MODES:
                path = work / f"{size}_{mode}.npz"
                results[size, mode] = run({**spec, "compile": mode != "off", "table": str(path)}, cache)
                with np.load(path) as z:
                    tables[mode] = EmitterTable.from_arrays(**{k: z[k] for k in z.files})
                print(size, mode, summarize(results[size, mode]), flush=True)
            same[size] = evaluate(tables["cold"], tables["off"], pixel_size=100.0, tolerance_lat=10.0)
    write_report(Path(args.out), args, results, same, time.perf_counter() - t_all)
    return 0


def write_report(out: Path, args: argparse.Namespace, results: dict, same: dict, seconds: float) -> None:
    first = next(iter(results.values()))
    lines = [
        "# torch.compile on the CPU",
        "",
        f"Command: `{args.command}`; {seconds / 60:.1f} min in all.",
        f"Machine: {machine_line(first['threads'])}.",
        "",
        __doc__.split("\n\n", 2)[2].strip(),
        "",
        f"Movies: {args.frames} frames each (uint16, density 1/µm²), sizes chosen by auto.",
        "",
        "| movie | tile core, batch | compile | first block (s) | steady state (ms/frame) | steady frames/s | "
        "whole movie (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    notes = []
    for size in args.sizes:
        r = results[size, "off"]
        runs = {mode: summarize(results[size, mode]) for mode in MODES}
        off = runs["off"]
        for mode, name in zip(MODES, ("off", "on, cold cache", "on, warm cache"), strict=True):
            s = runs[mode]
            lines.append(f"| {size}² | {r['chunk']}, {r['batch']} | {name} | {s['first_s']:.1f} | "
                         f"{1000 * s['steady_s_per_frame']:.0f} | {1 / s['steady_s_per_frame']:.2f} | "
                         f"{s['total_s']:.1f} |")
        on = runs["warm"]
        gain = off["steady_s_per_frame"] - on["steady_s_per_frame"]
        costs = {mode: runs[mode]["first_s"] - off["first_s"] for mode in ("cold", "warm")}
        even = ", ".join(f"{mode} {c / gain:.0f} frames ({c / gain * r['work_px'] / 1e6:.0f} M px of work)"
                         for mode, c in costs.items()) if gain > 0 else "never (compiled is not faster)"
        notes.append(f"- {size}² ({r['tiles']} tile(s) per frame, blocks of {off['first_frames']} frames): compiling "
                     f"costs {costs['cold']:.1f} s cold, {costs['warm']:.1f} s warm; the steady state is "
                     f"{off['steady_s_per_frame'] / on['steady_s_per_frame']:.2f}x as fast compiled (warm run); "
                     f"break-even: {even}. Same emitters (compiled vs not, matched within 10 nm): Jaccard "
                     f"{same[size].jaccard:.4f}, RMSE {same[size].rmse_lat:.3f} nm.")
    lines += ["", *notes, f"- `compile='auto'` compiles on a CPU from {first['min_work'] / 1e6:.0f} M px of work.", "",
              "![compile](compile.png)", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    _plot(results, out.with_suffix(".png"))


def _plot(results: dict, png: Path) -> None:
    from matplotlib.figure import Figure

    sizes = sorted({size for size, _ in results})
    fig = Figure(figsize=(4 * len(sizes), 3.5))
    for ax, size in zip(np.atleast_1d(fig.subplots(1, len(sizes))), sizes, strict=True):
        for mode, label in zip(MODES, ("compile off", "compile on, cold cache", "compile on, warm cache"),
                               strict=True):
            ends, frames = np.array(results[size, mode]["block_end_s"]), np.array(results[size, mode]["block_frames"])
            ax.plot(np.cumsum(frames), ends, marker=".", label=label)
        ax.set_xlabel("frames done")
        ax.set_ylabel("wall time (s)")
        ax.set_title(f"{size}²: predict_stack wall time")
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)


if __name__ == "__main__":
    raise SystemExit(main())
