"""Do parallel block streams pay on this CPU? ``predict_stack`` with ``streams`` 1 and 2 on the same sizes.

    python benchmarks/bench_streams.py            # benchmarks/results/streams.md + .png (+ .json: the raw runs)

One stream runs each block's network on all of torch's threads; its serial parts (staging the tiles,
post-processing) leave the other cores idle. ``streams=2`` computes two blocks at once, each with half the
threads. Each run is a fresh process (torch's default threads, ``OMP_WAIT_POLICY=PASSIVE`` as the CLIs set it);
the tile, batch and block sizes are chosen once by ``auto`` with one stream (an untimed first run) and then
given to every run, so only the streams differ. Per run: the whole call's frames/s (planning and the first
blocks included); the steady rate (the frames of the blocks after the first round of ``streams`` blocks, over
the time from that round's end to the last block's end; – where no block follows it); and the process's peak
RssAnon during the call (VmHWM reset at its start, less file pages; ``decode_mem.memory.measure_phase`` without
a sampling thread, which would take the GIL from the run it measures) beside the planner's prediction for that
many streams. Runs alternate (1, 2, 1, 2, ...) so that a slow spell of a shared machine does not land on one
setting. **Same emitters**: the outputs of one and two streams matched within 10 nm (Jaccard, RMSE). Every
number comes from the run that wrote the report.
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
MOVIES = {64: 800, 256: 400, 1024: 48}  # frame side -> frames (up to about three minutes per run here)

WORKER = """
import json, sys, time
import numpy as np
import torch
from decode_mem.infer import predict_stack
from decode_mem.io import open_stack
from decode_mem.io.table import EmitterTable
from decode_mem.memory import measure_phase
from decode_mem.model.checkpoint import load_model
a = json.loads(sys.argv[1])
model = load_model(a["model"])
marks, plans = [], []
with open_stack(a["movie"]) as stack, measure_phase("predict", interval=None) as peak:
    t0 = time.perf_counter()
    table = EmitterTable.concat(predict_stack(stack, model, chunk_size=a["chunk"], batch_size=a["batch"],
                                              block=a.get("block", "auto"), streams=a["streams"], on_plan=plans.append,
                                              on_block=lambda r: marks.append((time.perf_counter(), r.n_frames))))
    total = time.perf_counter() - t0
np.savez(a["table"], **{name: table[name] for name in table.names})
plan = plans[0].plan
print(json.dumps({"total_s": total, "block_end_s": [m[0] - t0 for m in marks], "block_frames": [m[1] for m in marks],
                  "chunk": plan.chunk_size, "batch": plan.batch_size, "block": plan.block, "tiles": plan.n_tiles,
                  "predicted_mb": plan.host_bytes / 2**20, "peak_mb": peak.rss_anon_peak_mb,
                  "hwm_exact": peak.hwm_exact, "threads": torch.get_num_threads(), "torch": torch.__version__}))
"""


def run(spec: dict) -> dict:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    done = subprocess.run([sys.executable, "-c", WORKER, json.dumps(spec)], cwd=ROOT, capture_output=True, text=True,
                          env=env)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=list(MOVIES), help="frame sides (px), a movie each")
    p.add_argument("--repeats", type=int, default=2, help="runs of each setting per movie (alternating)")
    p.add_argument("--model", default=str(ROOT / "data" / "models" / "default_2d.pt"))
    p.add_argument("--out", default=str(RESULTS / "streams.md"))
    args = p.parse_args(argv)
    args.command = command_line(argv)
    from decode_mem.evaluate.metrics import evaluate
    from decode_mem.io.table import EmitterTable
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.stack import simulate_stack

    t_all = time.perf_counter()
    runs: list[dict] = []
    same = {}
    with tempfile.TemporaryDirectory(prefix="bench_streams_") as tmp:
        work = Path(tmp)
        for size in args.sizes:
            frames = MOVIES.get(size, 100)
            movie = work / f"movie{size}.tif"
            simulate_stack(SimulationConfig(frame_size=(size, size), density=1.0, margin=6.0), frames, movie, seed=1)
            spec = {"model": args.model, "movie": str(movie)}
            first = run({**spec, "chunk": "auto", "batch": "auto", "streams": 1, "table": str(work / "first.npz")})
            spec |= {"chunk": first["chunk"], "batch": first["batch"], "block": first["block"]}
            tables = {}
            for repeat in range(args.repeats):
                for streams in (1, 2):
                    path = work / f"{size}_{streams}.npz"
                    r = run({**spec, "streams": streams, "table": str(path)})
                    r |= {"size": size, "frames": frames, "streams": streams, "repeat": repeat,
                          "steady_fps": steady_fps(r, streams)}
                    runs.append(r)
                    print(size, streams, repeat, {k: r[k] for k in ("steady_fps", "total_s", "peak_mb",
                                                                      "predicted_mb")}, flush=True)
                    with np.load(path) as z:
                        tables[streams] = EmitterTable.from_arrays(**{k: z[k] for k in z.files})
            same[size] = evaluate(tables[2], tables[1], pixel_size=100.0, tolerance_lat=10.0)
    Path(args.out).with_suffix(".json").write_text(json.dumps(runs, indent=1))  # the raw runs, block times included
    write_report(Path(args.out), args, runs, same, time.perf_counter() - t_all)
    return 0


def steady_fps(r: dict, streams: int) -> float | None:
    """Frames/s of the blocks after the first round of ``streams`` blocks (None: no block after it)."""
    ends, frames = r["block_end_s"], r["block_frames"]
    if len(ends) <= streams:
        return None
    return sum(frames[streams:]) / (ends[-1] - ends[streams - 1])


def write_report(out: Path, args: argparse.Namespace, runs: list[dict], same: dict, seconds: float) -> None:

    lines = [
        "# Parallel block streams on the CPU", "",
        f"Command: `{args.command}`; {seconds / 60:.1f} min in all.",
        f"Machine: {machine_line(str(runs[0]['threads']) + ' torch threads per process')}.", "",
        *[line.strip() for line in __doc__.split("\n\n", 2)[2].splitlines()], "",
        "| movie | tile core, batch, block | streams | run | whole call (frames/s) | steady (frames/s) | "
        "peak RssAnon (MiB) | predicted (MiB) | error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        error = (r["predicted_mb"] - r["peak_mb"]) / r["peak_mb"] if r["peak_mb"] else None
        lines.append(f"| {r['size']}² × {r['frames']} | {r['chunk']}, {r['batch']}, {r['block']} | {r['streams']} | "
                     f"{r['repeat'] + 1} | {r['frames'] / r['total_s']:.2f} | {_number(r['steady_fps'])} | "
                     f"{r['peak_mb']:.0f} | {r['predicted_mb']:.0f} | "
                     f"{'–' if error is None else f'{error:+.0%}'} |")
    lines.append("")
    for size in args.sizes:
        rows = {s: [r for r in runs if r["size"] == size and r["streams"] == s] for s in (1, 2)}
        whole = {s: _median([r["frames"] / r["total_s"] for r in rows[s]]) for s in rows}
        steady = {s: _median([r["steady_fps"] for r in rows[s]]) for s in rows}
        steady_gain = "–" if None in steady.values() else f"{steady[2] / steady[1]:.2f}x"
        m = same[size]
        lines.append(f"- {size}²: two streams over one (medians of {args.repeats} runs each): whole call "
                     f"{whole[2] / whole[1]:.2f}x, steady {steady_gain}; peak RssAnon "
                     f"{_median([r['peak_mb'] for r in rows[2]]):.0f} vs "
                     f"{_median([r['peak_mb'] for r in rows[1]]):.0f} MiB. Same emitters (two streams vs one, "
                     f"matched within 10 nm): Jaccard {m.jaccard:.4f}, RMSE {m.rmse_lat:.3f} nm.")
    errors = [abs(r["predicted_mb"] - r["peak_mb"]) / r["peak_mb"] for r in runs if r["peak_mb"]]
    lines += [f"- Planner: error median {np.median(errors):.0%}, largest {max(errors):.0%} over {len(errors)} runs; "
              f"VmHWM could be reset in {sum(bool(r['hwm_exact']) for r in runs)} of {len(runs)}.",
              "", "![streams](streams.png)", ""]
    out.write_text("\n".join(lines))
    plot(out.with_suffix(".png"), args.sizes, runs)
    print(f"wrote {out}")


def _median(values: list) -> float | None:
    """The median, or None where any value is missing."""
    return None if not values or None in values else float(np.median(values))


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def plot(path: Path, sizes: list[int], runs: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(sizes), figsize=(3.2 * len(sizes), 3.2), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        for streams, colour in ((1, "tab:blue"), (2, "tab:orange")):
            fps = [r["frames"] / r["total_s"] for r in runs if r["size"] == size and r["streams"] == streams]
            ax.bar(streams, np.median(fps), color=colour, alpha=0.6)
            ax.plot([streams] * len(fps), fps, "k.")
        ax.set_xticks([1, 2])
        ax.set_xlabel("streams")
        ax.set_ylabel("frames/s (whole call)")
        ax.set_title(f"{size}²")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
