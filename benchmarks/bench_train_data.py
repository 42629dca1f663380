"""Training windows per second: the per-window stream of decode_mem at ba2ec79 against the vectorised blocks.

    python benchmarks/bench_train_data.py                  # CPU, batch 16 and 64, 3 repeats (~3 min)
    python benchmarks/bench_train_data.py --quick          # batch 16, 1 repeat
    python benchmarks/bench_train_data.py --device cuda    # the blocks on the GPU beside the old CPU stream

What ``decode_mem.train`` asks of its data stream every step: ``SimulatedBatches(...).batch(step, 0)`` for
successive steps. The old stream is the package as it was at ``--old-rev`` (default ba2ec79, the code of the
first GPU run: one ``simulate_batch`` call per window, on the CPU), extracted with ``git archive`` and imported
through ``PYTHONPATH``; the new one is this checkout's (blocks of up to 64 windows per call, on ``--device``).
Each measurement runs in a fresh child process, old and new alternate, and the best of ``--repeats`` is kept
(the machine may be shared). Two physics: the shipped generalist's (pipelines/train_generalist_2d.yaml, 40×40
windows with size jitter, mixed backgrounds, EMCCD and sCMOS cameras with and without maps) and a fixed one
(one EMCCD, uniform background, 40×40). Writes benchmarks/results/train_data.md and .png (``--out``).
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

from command_line import command_line
from machine import commit, load_average, machine_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PHYSICS = ("generalist", "fixed")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seconds", type=float, default=4.0, help="least time per measurement")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (the generalist trains with 1)")
    p.add_argument("--device", default="cpu", help="where the new stream simulates (the old one: the CPU)")
    p.add_argument("--old-rev", default="ba2ec79")
    p.add_argument("--quick", action="store_true", help="batch 16, 1 repeat, 2 s each")
    p.add_argument("--out", type=Path, default=RESULTS / "train_data.md")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(measure(**json.loads(a.worker))))
        return 0
    if a.quick:
        a.batches, a.repeats, a.seconds = [16], 1, 2.0
    load_start, at = load_average(), commit()
    best: dict[tuple[str, str, int], float] = {}
    with tempfile.TemporaryDirectory() as old_tree:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", a.old_rev, "decode_mem", "pipelines"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", old_tree], input=archive, check=True)
        for _ in range(a.repeats):
            for physics in PHYSICS:
                for batch in a.batches:
                    for path, tree, device in (("old", old_tree, "cpu"), ("new", str(ROOT), a.device)):
                        job = {"physics": physics, "batch": batch, "seconds": a.seconds, "threads": a.threads,
                               "device": device, "new": path == "new", "tree": tree}
                        rate = run_worker(job, tree)
                        key = (path, physics, batch)
                        best[key] = max(best.get(key, 0.0), rate)
                        print(f"{path} {physics} batch {batch} on {device}: {rate:.0f} windows/s", flush=True)
    write_report(a, best, load_start, at)
    return 0


def run_worker(job: dict, tree: str) -> float:
    env = {**os.environ, "PYTHONPATH": tree, "OMP_NUM_THREADS": str(job["threads"])}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(job)], env=env,
                          capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"worker {job} failed:\n{done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["windows_per_s"])


def measure(physics: str, batch: int, seconds: float, threads: int, device: str, new: bool, tree: str) -> dict:
    """Windows/s of ``SimulatedBatches.batch`` for successive steps, in this process (a worker; ``tree`` holds the
    decode_mem it imports and the pipelines it reads)."""
    import torch

    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.train.config import load_train_config
    from decode_mem.train.data import SimulatedBatches

    torch.set_num_threads(threads)
    if physics == "generalist":
        cfg = load_train_config(Path(tree) / "pipelines" / "train_generalist_2d.yaml")
        config, jitter = cfg.simulation, cfg.size_jitter
    else:
        config, jitter = SimulationConfig(frame_size=(40, 40)), 0
    extra = {"device": device} if new else {}
    stream = SimulatedBatches(config, batch, 1, seed=0, size_jitter=jitter, **extra)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    stream.batch(0, 0)  # warm-up: imports, first calls, the CUDA context
    sync()
    steps, t0 = 0, time.perf_counter()
    while steps < 3 or time.perf_counter() - t0 < seconds:
        stream.batch(1 + steps, 0)
        steps += 1
    sync()
    return {"windows_per_s": steps * batch / (time.perf_counter() - t0)}


def write_report(a: argparse.Namespace, best: dict, load_start: float, at: str) -> None:
    import torch

    from decode_mem.io.atomic import atomic_output

    on_gpu = a.device.startswith("cuda")
    gpu = torch.cuda.get_device_name(0) if on_gpu else None
    lines = [
        "# Training windows per second: per-window stream vs vectorised blocks",
        "",
        f"Command: `{command_line()}`",
        "",
        f"Machine: {machine_line(a.threads, load_start=load_start, at=at, gpu=gpu)}",
        "",
        f"`SimulatedBatches(...).batch(step, 0)` for successive steps, best of {a.repeats} alternating runs of at "
        f"least {a.seconds:g} s each, every run in a fresh process. Old: decode_mem at {a.old_rev} (one "
        "`simulate_batch` call per window, CPU). New: this checkout (blocks of up to 64 windows per call, on "
        f"{a.device}). Generalist: pipelines/train_generalist_2d.yaml's physics (40×40 with size jitter 3, mixed "
        "backgrounds, EMCCD and sCMOS, maps half known); fixed: one EMCCD, uniform background, 40×40.",
        "",
        "| physics | batch | old (CPU) windows/s | new windows/s | new on | new / old |",
        "|---|---|---|---|---|---|",
    ]
    for physics in PHYSICS:
        for batch in a.batches:
            old, new = best[("old", physics, batch)], best[("new", physics, batch)]
            lines.append(f"| {physics} | {batch} | {old:.0f} | {new:.0f} | {a.device} | {new / old:.2f}× |")
    if not on_gpu:
        for physics in PHYSICS:
            for batch in a.batches:
                lines.append(f"| {physics} | {batch} | — | not measured (no GPU here) | cuda | — |")
    lines += ["", "On a CPU, `decode_mem.train` (num_workers 0) simulates the blocks in its own process; with CUDA it "
              "simulates them on the GPU; `--num_workers N` keeps the simulation in N CPU worker processes."]
    with atomic_output(a.out) as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    _plot(a, best, a.out.with_suffix(".png"))
    print(f"wrote {a.out}")


def _plot(a: argparse.Namespace, best: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    from decode_mem.io.atomic import atomic_output

    fig = Figure(figsize=(6.5, 3.2))
    ax = fig.add_subplot()
    labels, old, new = [], [], []
    for physics in PHYSICS:
        for batch in a.batches:
            labels.append(f"{physics}\nbatch {batch}")
            old.append(best[("old", physics, batch)])
            new.append(best[("new", physics, batch)])
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], old, 0.4, label=f"old: per window ({a.old_rev}, CPU)")
    ax.bar([x + 0.2 for x in xs], new, 0.4, label=f"new: blocks ({a.device})")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("training windows / s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
