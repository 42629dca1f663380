"""What a kill costs: ``infer`` SIGKILLed at 10 %, 50 % and 90 % of a long movie, then ``--resume``.

    python benchmarks/bench_resume.py                                   # 5000 frames of 256², ~1 emitter/µm²
    python benchmarks/bench_resume.py --frames 1200 --side 128 --journal_seconds 0 --fractions 0.1 0.5 \
        --out /tmp/resume.md   # smoke

A simulated EMCCD movie (``simulate_stack``) is localized once without interruption (the shipped model, default
sizes, CSV + Picasso HDF5 + parquet, default ``--journal_seconds``), then, for each fraction, a fresh run is
SIGKILLed once its journal holds that fraction of the frames and half a block's time more has passed (where in a
block a kill lands on average; a kill timed by the clock fails where runs go at different paces), and the
same command with ``--resume`` finishes it. Reported per fraction: the frames its journal
(``<stem>.progress/parts.json``) kept, the resumed run's wall time against the goal (the remaining fraction of the
uninterrupted run's time + 5 s: the block in hand at the kill and the resumed run's start count against it),
whether every output equals
the uninterrupted run's (CSV text, Picasso table, parquet table), and the bytes written twice: the journal's parquet
parts (every run writes them beside its outputs), the final files' partial bytes the kill discarded, and the bytes
the resume's replay writes again (the final files' share of the rows it replays). Writes
benchmarks/results/resume.md + .png + .json.
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from command_line import command_line
from machine import commit, load_average, machine_line
from report_files import add_render_option, write_report_files

RESULTS = Path(__file__).parent / "results"
FORMATS = "csv,picasso,parquet"
FINAL = ("movie.csv", "movie.hdf5", "movie.parquet")


def simulate(path: Path, frames: int, side: int, density: float) -> None:
    import torch

    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.stack import simulate_stack

    torch.set_num_threads(1)
    simulate_stack(SimulationConfig(frame_size=(side, side), density=density), frames, path, seed=0)


def infer(movie: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "decode_mem.infer", str(movie), "--out", str(out), "--format", FORMATS, "--quiet",
            *extra]


def journal_stop(out: Path) -> int:
    try:
        parts = json.loads((out / "movie.progress" / "parts.json").read_text())["parts"]
    except (OSError, ValueError, KeyError):
        return 0
    return int(parts[-1]["stop"]) if parts else 0


def size(paths: list[Path]) -> int:
    return sum(p.stat().st_size for p in paths if p.is_file())


def values(out: Path) -> dict[str, object]:
    import h5py
    import pyarrow.parquet as pq

    with h5py.File(out / "movie.hdf5", "r") as f:
        locs = f["locs"][...]
    return {"csv": (out / "movie.csv").read_text(), "picasso": locs, "parquet": pq.read_table(out / "movie.parquet")}


def same(a: dict[str, object], b: dict[str, object]) -> bool:
    return (a["csv"] == b["csv"] and np.array_equal(a["picasso"], b["picasso"])
            and a["parquet"].equals(b["parquet"]))


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's waited-for children so far."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def timed(cmd: list[str], cpu: dict[str, float] | None = None) -> float:
    """The wall seconds of ``cmd``; with ``cpu``, its CPU seconds in ``cpu["s"]``."""
    t0, c0 = time.perf_counter(), children_cpu_s()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {done.returncode}: {done.stderr[-2000:]}")
    if cpu is not None:
        cpu["s"] = children_cpu_s() - c0
    return time.perf_counter() - t0


def kill_goal_s(kept_frames: int, block: int, frames: int, whole_s: float) -> float:
    """The goal of a resume: the share of the frames left at the kill (after the frames kept and the half block
    computed after them) of the uninterrupted run's time, + 5 s."""
    return round((1 - min(frames, kept_frames + 0.5 * block) / frames) * whole_s + 5.0, 2)


def killed_then_resumed(movie: Path, out: Path, frames: int, fraction: float, whole_s: float,
                        journal: list[str], half_block_s: float) -> dict[str, object]:
    """SIGKILL once the journal holds ``fraction`` of the frames and half a block's time more has passed (where
    in a block a kill lands on average), then resume. The kill follows the run's own progress, not the clock:
    on a shared machine a run's pace varies by more than the goal's 5 s (a clock-timed kill once found the run
    already finished)."""
    proc = subprocess.Popen(infer(movie, out, *journal), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    t0 = time.perf_counter()
    while journal_stop(out) < fraction * frames and proc.poll() is None:
        time.sleep(0.02)
    time.sleep(half_block_s)
    if proc.poll() is not None:
        raise RuntimeError(f"the run ended before {fraction:.0%} of its frames: {proc.stderr.read()[-2000:]}")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_after_s = time.perf_counter() - t0
    kept = journal_stop(out)
    journal_bytes_at_kill = size(list((out / "movie.progress").glob("*.parquet*")))
    partial = {name: size([out / f"{name}.partial"]) for name in FINAL}
    parts = json.loads((out / "movie.progress" / "parts.json").read_text())["parts"]
    checkpoints = parts[-1].get("outputs", {}) if parts else {}
    cpu: dict[str, float] = {}
    resumed_s = timed(infer(movie, out, *journal, "--resume"), cpu)
    record = json.loads((out / "movie.json").read_text())
    block = record.get("sizes", {}).get("block")
    continued = record.get("resume_files", {}).get("continued", [])
    # a continued file loses only what the kill left after its last part; the others are written afresh
    discarded = sum(partial[n] - checkpoints[n]["bytes"] if n in continued else partial[n] for n in FINAL)
    return {"fraction": fraction, "kept_frames": kept, "killed_after_s": round(killed_after_s, 2),
            "resumed_s": round(resumed_s, 2), "resumed_cpu_s": round(cpu["s"], 2),
            "goal_s": kill_goal_s(kept, int(block or 0), frames, whole_s),
            "resumed_localization_s": record["wall_s"],
            "journal_bytes_at_kill": journal_bytes_at_kill, "discarded_partial_bytes": discarded,
            "continued": continued,
            "localizations": record["localizations"], "block": block,
            "out": out}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=5000)
    p.add_argument("--side", type=int, default=256)
    p.add_argument("--density", type=float, default=1.0, help="emitters per µm² per frame")
    p.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.5, 0.9])
    p.add_argument("--journal_seconds", type=float, help="infer's --journal_seconds (default: infer's, 5 s)")
    p.add_argument("--out", type=Path, default=RESULTS / "resume.md")
    add_render_option(p, "resume")
    args = p.parse_args(argv)
    if args.render is not None:
        return write(json.loads(args.render.read_text()), args.out)
    journal = [] if args.journal_seconds is None else ["--journal_seconds", str(args.journal_seconds)]
    from decode_mem.footprint.engines import compiled_dir

    load0, at = load_average(), commit()
    graphs_before = len(list(compiled_dir().rglob("*.pt2")))  # torch.compile's graphs kept on disk before the runs
    with tempfile.TemporaryDirectory(prefix="bench_resume_") as tmp:
        tmp = Path(tmp)
        movie = tmp / "movie.tif"
        simulate(movie, args.frames, args.side, args.density)
        whole = tmp / "whole"
        cpu: dict[str, float] = {}
        whole_s = timed(infer(movie, whole, *journal), cpu)
        reference = values(whole)
        final_bytes = size([whole / name for name in FINAL])
        whole_record = json.loads((whole / "movie.json").read_text())
        n_locs, whole_loc_s = whole_record["localizations"], whole_record["wall_s"]
        # the journal an uninterrupted run writes beside its outputs (removed at its end): measured on the rows
        # of a resumed run below, here estimated from the parquet output, which holds the same columns
        block = int(whole_record.get("sizes", {}).get("block") or 1)
        half_block_s = 0.5 * block * whole_loc_s / args.frames
        rows = []
        for fraction in args.fractions:
            row = killed_then_resumed(movie, tmp / f"kill{int(fraction * 100)}", args.frames, fraction, whole_s,
                                      journal, half_block_s)
            row["equal"] = same(values(row.pop("out")), reference)
            replayed = size([whole / name for name in FINAL if name not in row["continued"]])
            row["replayed_bytes"] = round(replayed * row["kept_frames"] / args.frames)
            rows.append(row)
    record = {"frames": args.frames, "side": args.side, "density": args.density, "uninterrupted_s": round(whole_s, 2),
              "uninterrupted_cpu_s": round(cpu["s"], 2), "uninterrupted_localization_s": whole_loc_s,
              "localizations": n_locs, "final_bytes": final_bytes, "rows": rows, "commit": at,
              "compiled_graphs_before": graphs_before,
              "command": command_line(argv), "journal_seconds": journal[-1] if journal else None,
              "machine": machine_line("torch's default", load_start=load0, at=at)}
    return write(record, args.out)


def machine_of(record: dict, out: Path) -> str:
    """The machine line of a measured record (a record from before the line was kept: the one its report wrote)."""
    if "machine" in record:
        return record["machine"]
    lines = out.read_text().splitlines() if out.is_file() else []
    return lines[4] if len(lines) > 4 else "machine: not recorded"


def continued_text(rows: list[dict]) -> str:
    """The files the resumes continued (records made before files were continued name none)."""
    names = sorted({n for r in rows for n in r.get("continued", [])})
    return ", ".join(names) + " here" if names else "none here"


def write(record: dict, out: Path) -> int:
    """The report of a measured ``record``: ``out`` (.md, .png, .json)."""
    rows, frames, side = record["rows"], record["frames"], record["side"]
    whole_s, whole_loc_s = record["uninterrupted_s"], record["uninterrupted_localization_s"]
    record = {**record, "machine": machine_of(record, out)}
    journal = record.get("journal_seconds")
    lines = [
        "# Resume after a kill (`infer` SIGKILLed, then `--resume`)", "",
        f"`{record['command']}`", "", f"Machine: {record['machine']}", "",
        f"A simulated {frames}-frame {side}² EMCCD movie ({record['density']} emitters/µm²), the shipped model, "
        f"default sizes, {FORMATS}, `--journal_seconds` {journal if journal else 'default (5 s)'}. "
        f"Uninterrupted: {whole_s:.1f} s, "
        f"{record['localizations']} localizations, final files {record['final_bytes'] / 1e6:.1f} MB.", "",
        f"Of the uninterrupted run's wall time, {whole_loc_s:.1f} s were the localization itself (`<stem>.json` "
        "`wall_s`: the blocks, from the first to the last; the rest is the process's start, the plan and the "
        "files' closing).", "",
        "| killed at | frames kept | resume (s) | of which localization (s) | start, plan, close (s) | "
        "pace: uninterrupted / resumed (frames/s) | goal: rest + 5 s | within goal | "
        "resume at the uninterrupted pace (s) | outputs equal | journal at the kill (MB) | "
        "partial final bytes discarded (MB) | replayed into final files (MB, est.) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    pace = frames / whole_loc_s  # the uninterrupted run's localization frames per second
    by_journal = all("killed_after_s" in r for r in rows)
    if by_journal:  # the goal from where the kill came (records made before it was stored so hold another)
        rows = [{**r, "goal_s": kill_goal_s(r["kept_frames"], int(r["block"] or 0), frames, whole_s)} for r in rows]
    for r in rows:
        left = frames - r["kept_frames"]
        other = r["resumed_s"] - r["resumed_localization_s"]
        at_pace = other + left / pace  # the same resume had it localized at the uninterrupted run's pace
        lines.append(f"| {r['fraction']:.0%} | {r['kept_frames']} | {r['resumed_s']:.1f} | "
                     f"{r['resumed_localization_s']:.1f} | {other:.1f} | "
                     f"{pace:.2f} / {left / r['resumed_localization_s']:.2f} | {r['goal_s']:.1f} | "
                     f"{'yes' if r['resumed_s'] <= r['goal_s'] else 'no'} | {at_pace:.1f} "
                     f"({'within' if at_pace <= r['goal_s'] else 'over'} the goal by "
                     f"{abs(at_pace - r['goal_s']):.1f}) | {'yes' if r['equal'] else 'NO'} | "
                     f"{r['journal_bytes_at_kill'] / 1e6:.1f} | {r['discarded_partial_bytes'] / 1e6:.1f} | "
                     f"{r['replayed_bytes'] / 1e6:.1f} |")
    killed = ("once the journal held that share of the frames, half a block's time later (where a kill lands in a "
              "block on average); the goal is the share of the frames left at the kill (those after the frames kept "
              "and the half block computed after them) of the uninterrupted run's time, + 5 s" if by_journal
              else "that share of the uninterrupted run's wall time")
    lines += ["", f"Killed at: {killed}. Frames kept: the journal's last part "
              f"when the kill came (a part is closed at the first block end 5 s after the last by default; blocks of "
              f"{rows[0]['block'] if rows else 'n/a'} frames here), so the frames computed after it and the block in "
              "hand are computed again. The journal's parts are "
              "parquet, written beside the final files by every run, and removed once `<stem>.json` is written. "
              "Discarded: what the kill left of the final files under their temporary names that the resume does "
              "not keep — the whole of a file written afresh (HDF5, parquet: whole only once closed), and of a file "
              f"the resume continues ({continued_text(rows)}) only the bytes after its last part. "
              "Replayed bytes are estimated as the size of the final files written afresh times the share of frames "
              "kept. "
              "Compiled graphs: torch.compile's graphs are kept on disk (`tiling.precompiled`; this machine's "
              f"`~/.cache/decode_mem/compiled`: {record.get('compiled_graphs_before', 'n/a')} graphs there before "
              "the first run here); a run finding its graphs there loads them rather than tracing the network. "
              "Start, plan, close: the resumed process's wall time outside its localization (importing torch, the "
              "model, the plan, closing the files, the report). Pace: frames localized per second of localization "
              "(the resumed run's includes its replay); on a shared machine the runs' paces differ, and the goal's "
              "comparison with them. Resume at the uninterrupted pace: the resume's start, plan and close plus its "
              "frames at the uninterrupted run's pace — the comparison with the goal without the runs' difference "
              "in pace; what stays over the goal is the resumed process's start and close and the block in hand "
              "the kill lost."]

    def draw(png: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (ax, over) = plt.subplots(1, 2, figsize=(11.0, 4.0), dpi=110, width_ratios=(3, 2))
        x = [r["fraction"] * 100 for r in rows]
        ax.plot(x, [r["resumed_s"] for r in rows], "o-", label="resumed run (measured)")
        ax.plot(x, [r["goal_s"] for r in rows], "s--",
                label="goal: the share left at the kill of the uninterrupted run + 5 s")
        ax.axhline(whole_s, color="grey", lw=0.8, label=f"uninterrupted run ({whole_s:.0f} s)")
        xlabel = ("killed at (% of the frames in the journal)" if by_journal
                  else "killed at (% of the uninterrupted run's time)")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("wall time (s)")
        ax.set_title(f"--resume after SIGKILL: {frames} frames of {side}²")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        # the margin is seconds on runs of minutes: invisible on the left, so on its own scale
        margin = [r["resumed_s"] - r["goal_s"] for r in rows]
        over.bar(x, margin, width=8, color=["tab:red" if m > 0 else "tab:green" for m in margin])
        over.axhline(0, color="black", lw=0.8)
        for xi, m in zip(x, margin, strict=True):
            over.annotate(f"{m:+.1f} s", (xi, m), ha="center", va="bottom" if m > 0 else "top", fontsize=8)
        over.set_xlabel(xlabel)
        over.set_ylabel("resume - goal (s; above 0: over the goal)")
        over.set_title("margin to the goal", fontsize=10)
        over.set_xticks(x)
        fig.tight_layout()
        fig.savefig(png)
        plt.close(fig)

    if "uninterrupted_cpu_s" in record and all("resumed_cpu_s" in r for r in rows):
        whole_cpu = record["uninterrupted_cpu_s"]
        cores = whole_cpu / whole_s
        lines += ["", "### The same resumes in CPU seconds (what a run gets of a shared machine's cores does not "
                      "change them)", "",
                  "| killed at | resume CPU s | the share left of the uninterrupted run's CPU s | extra CPU s of the "
                  "resume | cores in use: uninterrupted / resumed | resume at the uninterrupted run's cores in use "
                  "(s) | goal (s) | within goal |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            share = (r["goal_s"] - 5.0) / whole_s  # the share of the frames left at the kill
            at_cores = r["resumed_cpu_s"] / cores
            lines.append(f"| {r['fraction']:.0%} | {r['resumed_cpu_s']:.1f} | {share * whole_cpu:.1f} | "
                         f"{r['resumed_cpu_s'] - share * whole_cpu:+.1f} | {cores:.2f} / "
                         f"{r['resumed_cpu_s'] / r['resumed_s']:.2f} | {at_cores:.1f} | {r['goal_s']:.1f} | "
                         f"{'yes' if at_cores <= r['goal_s'] else 'no'} |")
        lines += ["", f"The uninterrupted run used {whole_cpu:.1f} CPU s in {whole_s:.1f} s ({cores:.2f} cores on "
                      "average). Extra CPU s: everything a resume does beyond the frames left at the kill — its "
                      "start, plan and close, replaying the journal into the final files, the frames computed after "
                      "the last part. Resume at the uninterrupted run's cores in use: its CPU seconds over the "
                      "uninterrupted run's average cores — its wall time had it got the same share of the machine; "
                      "replay included."]
    write_report_files(out, lines, draw, record)
    print("\n".join(lines))
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
