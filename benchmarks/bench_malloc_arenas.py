"""glibc's malloc arenas and `infer`: the same commands with glibc's default arenas and with decode_mem's one.

    python benchmarks/bench_malloc_arenas.py                       # ~10 min on a 2-core CPU
    python benchmarks/bench_malloc_arenas.py --frames 100 --repeats 1 --out /tmp/arenas.md   # smoke

glibc gives each thread that allocates its own arena (up to 8 per core); memory freed in one arena is not reused by
another, and the planner's timed candidates raise glibc's mmap threshold, so later tensors come from the arenas'
heaps. Every CLI caps the arenas at one (``decode_mem.threads.limit_malloc_arenas`` from ``cli.run``) unless
``MALLOC_ARENA_MAX`` is set; glibc's default is set here as ``MALLOC_ARENA_MAX`` = 8 × the cores. Two rows, each
command alternated between the two settings, ``--repeats`` times:

1. a simulated 256² EMCCD movie of ``--frames`` frames (the shipped model, default sizes, compile as ``auto``
   chooses, CSV): wall time, localization frames/s (``<stem>.json``) and peak RssAnon;
2. the memory table's default row at 2048² (a 3-frame uint16 stack, no size flags, an empty plan cache: the first
   run on that frame size times its candidates in the process): peak RssAnon beside the budget the run recorded.

Peaks: RssAnon sampled by ``decode_mem.memory.ProcessPeak``. Writes benchmarks/results/malloc_arenas.md + .png +
.json. The variable is set for the child process only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench_memory_table import stack
from bench_resume import simulate
from bench_throughput import timed
from command_line import command_line
from machine import commit, load_average, machine_line
from report_files import add_render_option, write_report_files

RESULTS = Path(__file__).parent / "results"
GLIBC = f"glibc's default (MALLOC_ARENA_MAX={8 * (os.cpu_count() or 1)})"
SETTINGS = {GLIBC: {"MALLOC_ARENA_MAX": str(8 * (os.cpu_count() or 1))}, "decode_mem's default (1 arena)": {}}


def run(movie: Path, out: Path, env: dict[str, str], cache: Path | None = None) -> dict:
    """One ``infer`` of ``movie`` into ``out`` (removed first) with ``env`` added; wall s, peak MiB, its record."""
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    full = dict(os.environ, **env)
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)
        full["DECODE_MEM_CACHE"] = str(cache / "throughput.json")
    seconds, peak, _ = timed([sys.executable, "-m", "decode_mem.infer", str(movie), "--out", str(out), "--format",
                              "csv", "--quiet"], env=full)
    record = json.loads((out / f"{movie.stem}.json").read_text())
    sizes = record.get("sizes", {})
    return {"wall_s": round(seconds, 2), "peak_mib": round(peak, 1), "frames_per_s": record.get("frames_per_s"),
            "budget_mib": sizes.get("budget_mib"),
            "predicted_mib": sizes.get("plan", {}).get("predicted_host_mib"), "compile": sizes.get("compile")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=1000, help="frames of the 256² movie")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", type=Path, default=RESULTS / "malloc_arenas.md")
    add_render_option(p, "malloc_arenas")
    args = p.parse_args(argv)
    if args.render is not None:
        return write(json.loads(args.render.read_text()), args.out)
    load0, at, t0 = load_average(), commit(), time.perf_counter()
    rows: dict[str, dict[str, list[dict]]] = {"256": {k: [] for k in SETTINGS}, "2048": {k: [] for k in SETTINGS}}
    with tempfile.TemporaryDirectory(prefix="bench_arenas_") as tmp:
        tmp = Path(tmp)
        movie = tmp / "movie.tif"
        simulate(movie, args.frames, 256, 1.0)
        big = stack(tmp / "d2048.tif", 2048)
        for _ in range(args.repeats):
            for name, env in SETTINGS.items():  # alternated: a drift of the machine's pace hits both
                rows["256"][name].append(run(movie, tmp / "o256", env))
                rows["2048"][name].append(run(big, tmp / "o2048", env, cache=tmp / "cache"))
                print(name, rows["256"][name][-1], rows["2048"][name][-1], flush=True)
    record = {"frames": args.frames, "repeats": args.repeats, "rows": rows, "commit": at,
              "command": command_line(argv), "minutes": round((time.perf_counter() - t0) / 60, 1),
              "machine": machine_line("torch's default", load_start=load0, at=at)}
    return write(record, args.out)


def write(record: dict, out: Path) -> int:
    rows = record["rows"]
    lines = ["# glibc malloc arenas and `infer`: glibc's default against decode_mem's one arena", "",
             f"`{record['command']}`; {record['minutes']} min", "", f"Machine: {record['machine']}", "",
             __doc__.split("\n\n", 2)[2].strip(), "",
             f"## {record['frames']}-frame 256² movie (each run listed; {record['repeats']} per setting, alternated)",
             "", "| setting | wall (s) | localization frames/s | peak RssAnon (MiB) | compiled |",
             "|---|---|---|---|---|"]
    for name, runs in rows["256"].items():
        for r in runs:
            lines.append(f"| {name} | {r['wall_s']:.1f} | {r['frames_per_s']} | {r['peak_mib']:.0f} | {r['compile']} |")
    lines += ["", "## 2048², 3 frames, no size flags, empty plan cache (the planner times its candidates)", "",
              "| setting | wall (s) | peak RssAnon (MiB) | budget (MiB) | plan (MiB) | peak within the budget |",
              "|---|---|---|---|---|---|"]
    for name, runs in rows["2048"].items():
        for r in runs:
            within = "n/a" if r["budget_mib"] is None else ("yes" if r["peak_mib"] <= r["budget_mib"] else "no")
            lines.append(f"| {name} | {r['wall_s']:.1f} | {r['peak_mib']:.0f} | {r['budget_mib']} | "
                         f"{r['predicted_mib']} | {within} |")

    def draw(png: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.6), dpi=110)
        names = list(rows["256"])
        for ax, key, field, label in ((axes[0], "256", "frames_per_s", "256²: localization frames/s"),
                                      (axes[1], "2048", "peak_mib", "2048² first run: peak RssAnon (MiB)")):
            for i, name in enumerate(names):
                values = [r[field] for r in rows[key][name] if r[field] is not None]
                ax.scatter([i] * len(values), values, s=40, label=name)
            if key == "2048":
                budgets = [r["budget_mib"] for runs in rows[key].values() for r in runs if r["budget_mib"]]
                if budgets:
                    ax.axhline(min(budgets), color="grey", lw=1, ls="--", label="budget (smallest recorded)")
                ax.legend(fontsize=8, loc="lower right")
            ax.set_ylim(bottom=0)
            ax.set_xticks(range(len(names)), [n.replace(" (", "\n(") for n in names], fontsize=8)
            ax.set_xlim(-0.6, len(names) - 0.4)
            ax.set_title(label, fontsize=10)
        fig.tight_layout()
        fig.savefig(png)
        plt.close(fig)

    write_report_files(out, lines, draw, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
