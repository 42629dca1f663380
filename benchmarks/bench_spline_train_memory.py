"""Peak host memory of the 3-D quick start's training on a bead-calibrated PSF file, against its plan.

    python benchmarks/bench_spline_train_memory.py [--steps 100] [--baseline-checkout DIR]
                                                   # results/spline_train_memory.md

The PSF: the 3-D quick start's pupil PSF calibrated from 10 simulated beads (``bench_psf_shape.calibrated_psf``,
a ~21 MB spline). Training: ``pipelines/astig3d.yaml``'s train section (16 windows of 32² px per step, the
model, the simulation with ``psf: spline`` on that file) for ``--steps`` steps, one ``python -m decode_mem.train``
process per run, its peak RssAnon sampled every 10 ms (``decode_mem.memory.ProcessPeak``) beside the planned
peak it wrote (``memory_plan.json``). Runs: this checkout on the PSF file and on ``psf: astig3d`` (the same
settings, a Gaussian PSF: no file), and with ``--baseline-checkout`` (e.g. ``git worktree add /tmp/base
<commit>``) the same PSF-file run of that checkout.

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

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from command_line import command_line
from machine import commit, load_average, machine_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def config(folder: Path, psf: Path | None, steps: int) -> Path:
    """The quick start's train settings as a train YAML: the PSF file, or ``psf: astig3d`` when None."""
    raw = yaml.safe_load((ROOT / "pipelines" / "astig3d.yaml").read_text())
    train = dict(raw["train"])
    sim = {**raw["simulate"]["simulation"], **train.pop("simulation")}
    sim.pop("pupil", None)
    if psf is None:
        sim["psf"] = "astig3d"
    else:
        sim["psf_file"] = str(psf)
    train.update(simulation=sim, steps=steps, val_every=steps, checkpoint_every=steps, log_every=steps)
    path = folder / f"train_{'spline' if psf is not None else 'astig3d'}.yaml"
    path.write_text(yaml.safe_dump(train, sort_keys=False))
    return path


def run(cfg: Path, out: Path, checkout: Path) -> dict:
    """One training process: wall seconds, peak RssAnon (MiB), planned host peak (MiB)."""
    from decode_mem.memory import ProcessPeak

    env = {**os.environ, "PYTHONPATH": str(checkout)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "decode_mem.train", "--config", str(cfg), "--out", str(out),
                             "--quiet"], cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    peak = ProcessPeak(proc, cap_mb=8000)
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"training failed ({cfg}):\n{err[-2000:]}")
    plan = json.loads((out / "memory_plan.json").read_text())
    return {"wall_s": time.perf_counter() - t0, "peak_mib": peak.join(), "plan_mib": plan["predicted_host_mib"],
            "baseline_mib": plan["baseline_mib"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--baseline-checkout", default=None, help="a checkout of an earlier commit to compare with")
    p.add_argument("--out", default=str(RESULTS / "spline_train_memory.md"))
    args = p.parse_args()
    load_start, at = load_average(), commit()
    base_at = commit(args.baseline_checkout) if args.baseline_checkout else None
    from bench_psf_shape import calibrated_psf

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        psf = calibrated_psf(folder)
        spline, astig = config(folder, psf, args.steps), config(folder, None, args.steps)
        runs = [(f"this version ({at}), PSF file", spline, ROOT), (f"this version ({at}), astig3d", astig, ROOT)]
        if args.baseline_checkout:
            runs.append((f"baseline ({base_at}), PSF file", spline, Path(args.baseline_checkout)))
        for i, (name, cfg, checkout) in enumerate(runs):
            rows.append((name, run(cfg, folder / f"run{i}", checkout)))
            print(name, rows[-1], flush=True)
    import torch

    lines = ["# 3-D quick start training on a PSF file: peak host memory against the plan", "",
             f"Command: `{command_line()}`", "",
             f"Machine: {machine_line(torch.get_num_threads(), load_start=load_start, at=at)}", "",
             f"`pipelines/astig3d.yaml`'s train settings (16 windows of 32² px per step), {args.steps} steps, one "
             "`python -m decode_mem.train` process per run; PSF file: the quick start's pupil PSF calibrated from "
             "10 simulated beads. Peak RssAnon sampled every 10 ms; the plan is the `memory_plan.json` the run "
             "wrote (baseline = RssAnon when it planned).", "",
             "| run | peak RssAnon [MiB] | planned peak [MiB] | peak / plan | baseline [MiB] | wall [s] |",
             "|---|---|---|---|---|---|"]
    for name, r in rows:
        ratio = f"{r['peak_mib'] / r['plan_mib']:.2f}" if r["peak_mib"] else "n/a"
        lines.append(f"| {name} | {r['peak_mib']:.0f} | {r['plan_mib']:.0f} | {ratio} | {r['baseline_mib']:.0f} | "
                     f"{r['wall_s']:.0f} |")
    lines += ["", "The cause of the baseline's excess: its training copied the simulation settings for every "
              "batch (`dataclasses.replace`, the size jitter) and each copy read the PSF file's coefficients "
              "again; this version shares one spline among the copies (`simulate.config._file_spline`)."
              if args.baseline_checkout else "No baseline run (`--baseline-checkout`)."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
