"""glibc's mmap threshold and `infer`: decode_mem's fixed 32 MiB against glibc's dynamic threshold.

    python benchmarks/bench_malloc_threshold.py                      # ~8 min on a 2-core CPU
    python benchmarks/bench_malloc_threshold.py --frames 60 --repeats 1 --out /tmp/threshold.md   # smoke

glibc maps every block above its mmap threshold (128 KiB at first) on its own, and raises the threshold (up to
32 MiB) when such a block is freed. A first run on a frame size times its size candidates, which raises it at
once; a rerun (the plan remembered) or a resumed run times nothing and maps its large tensors afresh for longer.
Every CLI fixes the threshold at 32 MiB (``decode_mem.threads.fix_malloc_thresholds`` from ``cli.run``);
``DECODE_MEM_MMAP_THRESHOLD=dynamic`` leaves glibc's. A simulated 256² EMCCD movie of ``--frames`` frames (the
shipped model, default sizes, CSV) is localized by ``python -m decode_mem.infer``: once per setting with an
empty plan cache (a first run), then ``--repeats`` times per setting, alternated, with the plan remembered (a
rerun). Per run: wall time, localization frames/s (``<stem>.json``), the process's user and system CPU seconds
and minor page faults (``getrusage`` of the child) and its peak RssAnon (``decode_mem.memory.ProcessPeak``).
Writes benchmarks/results/malloc_threshold.md + .png + .json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_resume import simulate
from bench_throughput import timed
from command_line import command_line
from machine import commit, load_average, machine_line
from report_files import add_render_option, write_report_files

RESULTS = Path(__file__).parent / "results"
FIXED, DYNAMIC = "fixed at 32 MiB (decode_mem's default)", "glibc's dynamic threshold"
SETTINGS = {FIXED: {}, DYNAMIC: {"DECODE_MEM_MMAP_THRESHOLD": "dynamic"}}


def run(movie: Path, out: Path, env: dict[str, str], cache: Path, fresh: bool) -> dict:
    """One ``infer`` of ``movie`` into ``out`` with ``env`` added and the plan cache ``cache`` (emptied first
    where ``fresh``): wall s, frames/s, CPU s, minor faults, peak MiB."""
    shutil.rmtree(out, ignore_errors=True)
    if fresh:
        shutil.rmtree(cache, ignore_errors=True)
    full = dict(os.environ, **env, DECODE_MEM_CACHE=str(cache / "throughput.json"))
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):  # this process's own, set by no CLI here
        full.pop(name, None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds, peak, _ = timed([sys.executable, "-m", "decode_mem.infer", str(movie), "--out", str(out), "--format",
                              "csv", "--quiet"], env=full)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = json.loads((out / f"{movie.stem}.json").read_text())
    return {"wall_s": round(seconds, 2), "frames_per_s": record.get("frames_per_s"),
            "user_s": round(after.ru_utime - before.ru_utime, 2), "sys_s": round(after.ru_stime - before.ru_stime, 2),
            "minor_faults": after.ru_minflt - before.ru_minflt, "peak_mib": round(peak, 1),
            "compile": record.get("sizes", {}).get("compile")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=400, help="frames of the 256² movie")
    p.add_argument("--repeats", type=int, default=3, help="reruns per setting (the plan remembered)")
    p.add_argument("--out", type=Path, default=RESULTS / "malloc_threshold.md")
    add_render_option(p, "malloc_threshold")
    args = p.parse_args(argv)
    if args.render is not None:
        return write(json.loads(args.render.read_text()), args.out)
    load0, at, t0 = load_average(), commit(), time.perf_counter()
    rows: dict[str, dict[str, list[dict]]] = {"first": {k: [] for k in SETTINGS}, "rerun": {k: [] for k in SETTINGS}}
    with tempfile.TemporaryDirectory(prefix="bench_threshold_") as tmp:
        tmp = Path(tmp)
        movie = tmp / "movie.tif"
        simulate(movie, args.frames, 256, 1.0)
        for i, (name, env) in enumerate(SETTINGS.items()):  # a first run each (empty plan cache), then reruns
            rows["first"][name].append(run(movie, tmp / "out", env, tmp / f"cache_first_{i}", fresh=True))
            print("first", name, rows["first"][name][-1], flush=True)
        cache = tmp / "cache"
        run(movie, tmp / "out", {}, cache, fresh=True)  # the plan, remembered for the reruns (not reported)
        for _ in range(args.repeats):
            for name, env in SETTINGS.items():  # alternated: a drift of the machine's pace hits both
                rows["rerun"][name].append(run(movie, tmp / "out", env, cache, fresh=False))
                print("rerun", name, rows["rerun"][name][-1], flush=True)
    record = {"frames": args.frames, "repeats": args.repeats, "rows": rows, "commit": at,
              "command": command_line(argv), "minutes": round((time.perf_counter() - t0) / 60, 1),
              "machine": machine_line("torch's default", load_start=load0, at=at)}
    return write(record, args.out)


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def write(record: dict, out: Path) -> int:
    rows = record["rows"]
    lines = ["# glibc's mmap threshold and `infer`: fixed at 32 MiB against glibc's dynamic threshold", "",
             f"`{record['command']}`; {record['minutes']} min", "", f"Machine: {record['machine']}", "",
             __doc__.split("\n\n", 2)[2].strip(), "",
             f"## {record['frames']}-frame 256² movie (each run listed)", "",
             "| run | setting | wall (s) | localization frames/s | user CPU s | system CPU s | minor faults | "
             "peak RssAnon (MiB) | compiled |", "|---|---|---|---|---|---|---|---|---|"]
    for kind, label in (("first", "first (empty plan cache)"), ("rerun", "rerun (plan remembered)")):
        for name, runs in rows[kind].items():
            for r in runs:
                lines.append(f"| {label} | {name} | {r['wall_s']:.1f} | {r['frames_per_s']} | {r['user_s']:.1f} | "
                             f"{r['sys_s']:.1f} | {r['minor_faults']} | {r['peak_mib']:.0f} | {r['compile']} |")
    fixed, dynamic = rows["rerun"][FIXED], rows["rerun"][DYNAMIC]
    lines += [""]
    if fixed and dynamic:
        ratio = lambda key: _median(dynamic, key) / _median(fixed, key)  # noqa: E731
        lines.append(f"Reruns, medians of {len(fixed)}: glibc's dynamic threshold against the fixed one: system CPU s "
                     f"{_median(dynamic, 'sys_s'):.1f} against {_median(fixed, 'sys_s'):.1f} ({ratio('sys_s'):.2f}x), "
                     f"minor faults {_median(dynamic, 'minor_faults'):.0f} against "
                     f"{_median(fixed, 'minor_faults'):.0f} ({ratio('minor_faults'):.2f}x), localization frames/s "
                     f"{_median(dynamic, 'frames_per_s'):.3g} against {_median(fixed, 'frames_per_s'):.3g}, peak "
                     f"RssAnon {_median(dynamic, 'peak_mib'):.0f} against {_median(fixed, 'peak_mib'):.0f} MiB.")

    def draw(png: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), dpi=110)
        names = list(SETTINGS)
        for ax, key, label in ((axes[0], "frames_per_s", "localization frames/s"),
                               (axes[1], "sys_s", "system CPU s"), (axes[2], "minor_faults", "minor page faults")):
            for kind, marker in (("first", "s"), ("rerun", "o")):
                for i, name in enumerate(names):
                    values = [r[key] for r in rows[kind][name] if r.get(key) is not None]
                    ax.scatter([i + (0.12 if kind == "rerun" else -0.12)] * len(values), values, s=40,
                               marker=marker, color=f"C{i}",
                               label=f"{kind}" if i == 0 else None)
            ax.set_ylim(bottom=0)
            ax.set_xticks(range(len(names)), [n.replace(" (", "\n(") for n in names], fontsize=8)
            ax.set_xlim(-0.6, len(names) - 0.4)
            ax.set_title(label, fontsize=10)
        axes[0].legend(fontsize=8, loc="lower right", title="run (squares: empty plan cache)", title_fontsize=7)
        fig.tight_layout()
        fig.savefig(png)
        plt.close(fig)

    write_report_files(out, lines, draw, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
