"""The wide generalist against the small one, where they would run: training and localization speed per device.

    python benchmarks/bench_wide.py [--device cpu|cuda] [--threads 1]  # -> benchmarks/results/wide_model[_<dev>].md

(``--warm_steps``, ``--batch``, ``--size``, ``--densities`` and the frame counts make a tiny run possible, as
``tests/benchmarks/test_bench_smoke.py`` does: its numbers measure nothing.)

1. **Training**: steps per second of the two recipes (``pipelines/train_generalist_2d_stage2.yaml``, the small
   model's last full stage, and ``pipelines/train_generalist_2d_wide.yaml``) through the public
   ``decode_mem.train.fit``, their own simulation and batch, timed from the train log between step
   ``--warm_steps`` (``WARM_STEPS``) and the last; from it the time the wide recipe's steps would take on this device.
2. **Localization**: frames per second of the two architectures (weights do not change the speed) through
   ``predict_stack`` on 256 x 256 frames (``--size``), sizes chosen by the planner, after a warm-up.
3. **Tried for the small model per unit of compute**: inference precision (``amp`` bf16 against fp32) on the
   reference physics at 0.2 / 1 / 2 emitters/um2 (``bench_accuracy``'s movies: EMCCD, sigma 1 px, 100 nm,
   5000 +- 1500 photons, background 100), Jaccard and RMSE of the shipped small model.

Every number comes from the run that writes the report; the GPU rows exist only where the run had one.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
RECIPES = {"small": ROOT / "pipelines" / "train_generalist_2d_stage2.yaml",
           "wide": ROOT / "pipelines" / "train_generalist_2d_wide.yaml"}
WARM_STEPS = 5
DENSITIES = (0.2, 1.0, 2.0)


def train_speed(recipe: Path, device: str, threads: int, steps: int, work: Path, warm_steps: int = WARM_STEPS,
                batch: int | None = None) -> dict:
    """Steps/s of ``recipe`` through ``decode_mem.train.fit`` (its batch, or ``batch``, and its simulation) over the
    ``steps`` after the first ``warm_steps``."""
    from decode_mem.train import fit, load_train_config

    recipe_cfg = load_train_config(recipe)
    out = work / recipe.stem
    total = warm_steps + steps
    cfg = replace(recipe_cfg, out=str(out), steps=total, max_minutes=None, resume=False, init_from=None, val_size=16,
                  val_every=10**9, log_every=1, checkpoint_every=10**9, device=device, threads=threads,
                  memory_tracking=False, quiet=True, batch_size=batch or recipe_cfg.batch_size)
    fit(cfg)
    with open(out / "train_log.csv") as fh:
        rows = {int(r["step"]): float(r["time_s"]) for r in csv.DictReader(fh)}
    seconds = rows[total] - rows[warm_steps]
    return {"features": cfg.model.features, "batch": cfg.batch_size, "steps_per_s": steps / seconds,
            "recipe_steps": recipe_cfg.steps}


def infer_speed(features: int, device: str, frames: int, size: int = 256) -> float:
    """Frames/s of a 2-D network of ``features`` (the generalists' other settings) on ``size`` x ``size`` frames."""
    import numpy as np
    import torch

    from decode_mem.infer.predict import predict_stack
    from decode_mem.model.config import ModelConfig
    from decode_mem.model.net import DecodeNet

    torch.manual_seed(0)
    net = DecodeNet(ModelConfig(depth=2, features=features, inter_features=features, input_transform="anscombe",
                                input_scale=3.0, photon_scale=30000.0, bg_param="sqrt", bg_scale=4000.0))
    stack = np.random.default_rng(0).poisson(100.0, (frames, size, size)).astype(np.float32)
    for _ in predict_stack(stack[:8], net, device=device):  # warm-up: kernels, the planner's timing
        pass
    t0 = time.perf_counter()
    for _ in predict_stack(stack, net, device=device):
        pass
    return frames / (time.perf_counter() - t0)


def precision_rows(device: str, frames: int, work: Path, densities: tuple[float, ...] = DENSITIES) -> list[dict]:
    """The shipped small model at amp bf16 and fp32 on the reference physics at ``densities``."""
    from decode_mem.evaluate import evaluate
    from decode_mem.infer.predict import predict_stack
    from decode_mem.io import open_stack
    from decode_mem.io.camera import Camera
    from decode_mem.io.localizations import read_localizations
    from decode_mem.io.table import EmitterTable
    from decode_mem.model.checkpoint import SHIPPED_MODEL, load_model
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.stack import simulate_stack

    cam = Camera.emccd()
    model = load_model(SHIPPED_MODEL)
    rows = []
    for i, density in enumerate(densities):
        sim = SimulationConfig(frame_size=(64, 64), density=density, photons_mean=5000.0, photons_std=1500.0,
                               bg=100.0, psf="gauss2d", psf_sigma=1.0, camera=cam)
        path, gt = work / f"reference_{i}.tif", work / f"reference_{i}.csv"
        seed = 100 + (DENSITIES.index(density) if density in DENSITIES else i)
        simulate_stack(sim, frames, path, gt, seed=seed)  # bench_accuracy's test movies (its seeds)
        truth = read_localizations(gt, pixel_size=cam.pixel_size)
        for amp in ("bf16", "off"):
            with open_stack(path) as s:
                table = EmitterTable.concat(list(predict_stack(s, model, chunk_size=512, batch_size=16, amp=amp,
                                                               device=device)))
            m = evaluate(table, truth, pixel_size=cam.pixel_size)
            rows.append({"density": density, "amp": amp, "jaccard": m.jaccard, "rmse_lat": m.rmse_lat})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    p.add_argument("--steps", type=int, default=40, help="training steps timed per recipe (after the warm-up)")
    p.add_argument("--warm_steps", type=int, default=WARM_STEPS, help="training steps run before the timed ones")
    p.add_argument("--batch", type=int, help="training batch of both recipes (default: each recipe's own)")
    p.add_argument("--frames", type=int, default=64, help="frames localized per architecture")
    p.add_argument("--size", type=int, default=256, help="side of the localized frames (px)")
    p.add_argument("--reference_frames", type=int, default=500, help="frames of each reference movie (section 3)")
    p.add_argument("--densities", type=float, nargs="+", default=list(DENSITIES),
                   help="emitters/um2 of the reference movies (section 3)")
    p.add_argument("--out", help="report path (default benchmarks/results/wide_model[_<device>].md)")
    args = p.parse_args(argv)
    if min(args.steps, args.warm_steps, args.frames, args.reference_frames) < 1 or (args.batch or 1) < 1:
        p.error("--steps, --warm_steps, --batch, --frames and --reference_frames must be at least 1")

    import torch
    from command_line import command_line
    from machine import commit, load_average, machine_line

    torch.set_num_threads(args.threads)
    load_start, at, t_all = load_average(), commit(), time.perf_counter()
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else None
    with tempfile.TemporaryDirectory(prefix="bench_wide_") as tmp:
        work = Path(tmp)
        train = {name: train_speed(path, args.device, args.threads, args.steps, work, args.warm_steps, args.batch)
                 for name, path in RECIPES.items()}
        for name, row in train.items():
            row["infer_fps"] = infer_speed(row["features"], args.device, args.frames, args.size)
            print(f"{name}: {row['steps_per_s']:.2f} steps/s, {row['infer_fps']:.1f} frames/s", flush=True)
        precision = precision_rows(args.device, args.reference_frames, work, tuple(args.densities))
    machine = machine_line(args.threads, load_start=load_start, at=at, gpu=gpu)
    suffix = "" if args.device == "cpu" else f"_{args.device.split(':')[0]}"
    out = Path(args.out or RESULTS / f"wide_model{suffix}.md")
    write_report(out, train, precision, command_line(), machine, time.perf_counter() - t_all, args)
    return 0


def write_report(out: Path, train: dict, precision: list[dict], command: str, machine: str, seconds: float,
                 args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from decode_mem.io.atomic import atomic_output
    from decode_mem.report.figures import png_bytes

    small, wide = train["small"], train["wide"]
    hours = wide["recipe_steps"] / wide["steps_per_s"] / 3600
    lines = [
        "# The wide generalist against the small one: speed where they run, and what was tried for the small one",
        "",
        f"Command: `{command}`; {seconds / 60:.1f} min in all.",
        f"Machine: {machine}. Device: {args.device}.",
        "",
        "## 1-2. Training and localization speed",
        "",
        f"| model | features | batch | training steps/s | localization frames/s ({args.size} x {args.size}) |",
        "|---|---|---|---|---|",
    ]
    for name, r in train.items():
        lines.append(f"| {name} | {r['features']} | {r['batch']} | {r['steps_per_s']:.2f} | {r['infer_fps']:.1f} |")
    lines += [
        "",
        f"- The wide model trains {small['steps_per_s'] / wide['steps_per_s']:.1f}x slower per step and localizes "
        f"{small['infer_fps'] / wide['infer_fps']:.1f}x slower per frame than the small one on this device.",
        f"- Its recipe's {wide['recipe_steps']} steps would take {hours:.1f} h here ({hours * 60 / 9:.0f} pieces of "
        "9 minutes).",
        "",
        "## 3. Tried for the small model per unit of compute: inference precision",
        "",
        "The shipped small model on the reference physics (bench_accuracy's test movies, "
        f"{args.reference_frames} frames of 64 x 64), bf16 against fp32 inference:",
        "",
        "| density (/um2) | amp | Jaccard | RMSE lat (nm) |",
        "|---|---|---|---|",
    ]
    for r in precision:
        lines.append(f"| {r['density']:g} | {r['amp']} | {r['jaccard']:.4f} | {r['rmse_lat']:.2f} |")
    by = {(r["density"], r["amp"]): r for r in precision}
    worst = max(abs(by[(d, "bf16")]["jaccard"] - by[(d, "off")]["jaccard"]) for d in args.densities)
    lines += ["", f"- Largest Jaccard difference between the two: {worst:.4f}.", "",
              "![wide_model](" + out.with_suffix(".png").name + ")", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(out) as tmp:
        tmp.write_text("\n".join(lines))
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    names = list(train)
    axes[0].bar(names, [train[n]["steps_per_s"] for n in names], color=["tab:blue", "tab:orange"])
    axes[0].set_ylabel("training steps/s")
    axes[1].bar(names, [train[n]["infer_fps"] for n in names], color=["tab:blue", "tab:orange"])
    axes[1].set_ylabel(f"frames/s ({args.size} x {args.size})")
    fig.suptitle(f"small vs wide generalist on {args.device} ({args.threads} thread(s))")
    fig.tight_layout()
    with atomic_output(out.with_suffix(".png")) as tmp:
        tmp.write_bytes(png_bytes(fig, dpi=110))
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
