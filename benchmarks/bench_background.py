"""Does the wide model's background training slow the work beside it? ``infer`` timed with and without it.

    python benchmarks/bench_background.py                      # 600 frames of 128², 3 rounds of each
    python benchmarks/bench_background.py --frames 60 --side 32 --rounds 1 --out /tmp/bg.md   # smoke

The background job is the one ``pipelines/train_wide_background.sh`` runs: ``decode_mem.train`` on the wide recipe,
one thread, under SCHED_IDLE and ``nice -n 19`` (here into a temporary folder, from step 0: the same work per step).
``infer`` (default threads, CSV) localizes a simulated EMCCD movie; runs alternate without and with the training
running, after one unmeasured warm-up run. Reported: each run's wall time and localization time, the medians and
their ratio, the training steps the background job did meanwhile, and the load average. Other training processes on
the machine (e.g. the real background job, unless stopped with SIGSTOP) are named in the report: pause them for a
clean measurement. Writes
benchmarks/results/background.md + .png + .json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_resume import simulate, timed
from command_line import command_line
from machine import commit, load_average, machine_line
from report_files import write_report_files

RESULTS = Path(__file__).parent / "results"
REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "pipelines" / "train_generalist_2d_wide.yaml"
BACKGROUND = ("chrt", "--idle", "0", "nice", "-n", "19")  # as pipelines/train_wide_background.sh runs the training


def other_training() -> list[str]:
    """Command lines of training processes already running on this machine (they would load both cases)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            state = next(line for line in (proc / "status").read_text().splitlines() if line.startswith("State:"))
        except (OSError, StopIteration):
            continue
        if "decode_mem.train" in cmd and "stopped" not in state:
            found.append(cmd[:120])
    return found


def infer_once(movie: Path, out: Path) -> tuple[float, float]:
    """(wall s, localization s from <stem>.json) of one ``infer`` process."""
    wall = timed([sys.executable, "-m", "decode_mem.infer", str(movie), "--out", str(out), "--quiet", "--format",
                  "csv"])
    return wall, float(json.loads((out / f"{movie.stem}.json").read_text())["wall_s"])


def steps_done(run: Path) -> int | None:
    """The background run's last logged step (its ``train_log.csv``), None before its first log line."""
    log = run / "train_log.csv"
    try:
        rows = log.read_text().strip().splitlines()
        return int(rows[-1].split(",")[0]) if len(rows) > 1 else None
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=600)
    p.add_argument("--side", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3, help="runs without and with the background job, alternating")
    p.add_argument("--out", type=Path, default=RESULTS / "background.md")
    args = p.parse_args(argv)
    load0, at, others = load_average(), commit(), other_training()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="bench_background_") as tmp:
        tmp = Path(tmp)
        movie = tmp / "movie.tif"
        simulate(movie, args.frames, args.side, density=1.0)
        infer_once(movie, tmp / "warm")  # page cache, model file, the planner's remembered timings
        steps: list[int | None] = []
        for i in range(args.rounds):
            bg_run = tmp / f"train{i}"  # a fresh run each time (from step 0)
            for with_training in (False, True):
                job = None
                if with_training:
                    job = subprocess.Popen([*BACKGROUND, sys.executable, "-m", "decode_mem.train", "--config",
                                            str(RECIPE), "--out", str(bg_run), "--device", "cpu", "--threads", "1",
                                            "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(20.0)  # past its start (imports, data set-up): training steps when infer starts
                try:
                    wall, loc = infer_once(movie, tmp / f"run{i}_{int(with_training)}")
                finally:
                    if job is not None:
                        job.send_signal(signal.SIGINT)
                        try:
                            job.wait(timeout=60)
                        except subprocess.TimeoutExpired:
                            job.kill()
                            job.wait()
                runs.append({"round": i, "training": with_training, "wall_s": round(wall, 2),
                             "localization_s": round(loc, 2)})
            steps.append(steps_done(bg_run))

    def median(training: bool, key: str) -> float:
        return statistics.median(float(r[key]) for r in runs if r["training"] == training)

    without, with_ = median(False, "wall_s"), median(True, "wall_s")
    loc_without, loc_with = median(False, "localization_s"), median(True, "localization_s")
    record = {"frames": args.frames, "side": args.side, "rounds": args.rounds, "runs": runs,
              "median_wall_without_s": without, "median_wall_with_s": with_, "ratio": round(with_ / without, 4),
              "median_localization_without_s": loc_without, "median_localization_with_s": loc_with,
              "background_steps_logged": steps, "other_training_processes": others, "commit": at,
              "command": command_line(argv)}
    lines = [
        "# Background training beside the work (`infer` with and without it)", "",
        f"`{record['command']}`", "", machine_line("torch's default", load_start=load0, at=at), "",
        f"`infer` on a simulated {args.frames}-frame {args.side}² EMCCD movie (1 emitter/µm², the shipped model, "
        f"default threads, CSV), alternating without and with the wide recipe training as `{' '.join(BACKGROUND)}` on "
        "one thread "
        f"(as `pipelines/train_wide_background.sh` runs it), {args.rounds} round(s) after a warm-up run.", "",
        "| case | median wall (s) | median localization (s) |", "|---|---|---|",
        f"| without the training | {without:.2f} | {loc_without:.2f} |",
        f"| with the training | {with_:.2f} | {loc_with:.2f} |", "",
        f"With / without: wall {with_ / without:.3f}, localization {loc_with / loc_without:.3f}. The background job's "
        "last logged step in each round (it logs every 10 steps): "
        + ", ".join("n/a (no log line yet)" if n is None else str(n) for n in steps) + ".",
        "", "Other training processes running when the benchmark started: "
        + ("; ".join(f"`{c}`" for c in others) if others else "none") + ".", "",
        "| round | training | wall (s) | localization (s) |", "|---|---|---|---|",
        *[f"| {r['round']} | {'yes' if r['training'] else 'no'} | {r['wall_s']} | {r['localization_s']} |"
          for r in runs]]

    def draw(png: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5.6, 3.6), dpi=110)
        for training, colour in ((False, "tab:blue"), (True, "tab:orange")):
            xs = [r["round"] + (0.2 if training else -0.2) for r in runs if r["training"] == training]
            ax.bar(xs, [r["wall_s"] for r in runs if r["training"] == training], width=0.4, color=colour,
                   label="with the background training" if training else "without")
        ax.set_xticks(range(args.rounds), [f"round {i + 1}" for i in range(args.rounds)])
        ax.set_ylabel("infer wall time (s)")
        ax.set_title(f"infer, {args.frames} frames of {args.side}²: with / without {with_ / without:.3f}")
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        fig.savefig(png)
        plt.close(fig)

    write_report_files(args.out, lines, draw, record)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
