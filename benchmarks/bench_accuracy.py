"""Accuracy of decode_mem's shipped 2D model against Picasso (identify + LQ Gaussian fit) on simulated stacks.

    python benchmarks/bench_accuracy.py                      # writes benchmarks/results/accuracy.md + .png

Data: 64×64 px, 100 nm pixels, 500 frames, σ_PSF = 1 px, photons N(5000, 1500) per frame with blinking (mean
on-time 2 frames), background 100 photons/px, the default EMCCD, at 0.2 / 1 / 2 emitters/µm². Both methods see
the *same* frames; every ground-truth emitter counts (edge and dim ones too); matching: 250 nm, optimal
(decode_mem.evaluate). Picasso's box and minimum net gradient are tuned for the best Jaccard on a separate tuning
stack (other seed) of the same density: every box is fitted once at a low threshold, then each threshold is a
filter on the net gradient (identification at a higher threshold keeps exactly those maxima).

Picasso runs in its own interpreter (``--picasso-python``; see ``picasso_runner.py`` for the venv recipe).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from command_line import command_line
from machine import machine_line
from picasso_runner import NG_FLOOR, camera_settings, find_picasso_python, picasso_version, tuned_picasso

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DENSITIES = {"low": 0.2, "medium": 1.0, "high": 2.0}
GOALS = {"low": 0.90, "medium": 0.85, "high": 0.80}
WIDE_GOALS = {"low": 0.95, "medium": 0.92, "high": 0.90}  # the wide generalist's (issue 49)
SHIP_MARGIN = 0.01  # the wide model ships only if its Jaccard beats the small model's by this at 1 and 2/µm²


def reference_simulation(density: float):
    """The reference physics (the module docstring's) at ``density`` emitters/µm²."""
    from decode_mem.io.camera import Camera
    from decode_mem.simulate.config import SimulationConfig

    return SimulationConfig(frame_size=(64, 64), density=density, photons_mean=5000.0, photons_std=1500.0,
                            bg=100.0, psf="gauss2d", psf_sigma=1.0, camera=Camera.emccd())


def run_decode(stack: Path, model_path: Path) -> tuple[object, float]:
    from decode_mem.infer.predict import predict_stack
    from decode_mem.io import open_stack
    from decode_mem.io.table import EmitterTable
    from decode_mem.model.checkpoint import load_model

    model = load_model(model_path)
    with open_stack(stack) as s:
        list(predict_stack(s[:4], model, chunk_size=512, batch_size=16))  # warm-up, not timed
        t0 = time.perf_counter()
        table = EmitterTable.concat(list(predict_stack(s, model, chunk_size=512, batch_size=16)))
    return table, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=500)
    p.add_argument("--model", default=str(ROOT / "data" / "models" / "default_2d.pt"))
    p.add_argument("--narrow", default=str(ROOT / "data" / "models" / "narrow_2d.pt"),
                   help="the earlier narrow model, run on the same stacks for comparison ('' to skip)")
    p.add_argument("--wide", default=str(ROOT / "data" / "models" / "default_2d_wide.pt"),
                   help="the wide generalist (48 features), run on the same stacks beside the shipped small model "
                        "('' or a missing file: skipped)")
    p.add_argument("--picasso-python", help="interpreter with picassosr installed")
    p.add_argument("--out", default=str(RESULTS / "accuracy.md"))
    args = p.parse_args(argv)

    import torch

    from decode_mem.evaluate import evaluate
    from decode_mem.io.camera import Camera
    from decode_mem.io.localizations import read_localizations
    from decode_mem.simulate.stack import simulate_stack

    torch.set_num_threads(1)
    python = find_picasso_python(args.picasso_python)
    if python is None:
        raise SystemExit("no Python with picassosr found: see benchmarks/picasso_runner.py, pass --picasso-python")
    cam = Camera.emccd()
    camera = camera_settings(cam)
    px = cam.pixel_size
    rows = []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_accuracy_") as tmp:
        work = Path(tmp)
        for i, (name, density) in enumerate(DENSITIES.items()):
            sim = reference_simulation(density)
            paths = {}
            for role, seed in (("test", 100 + i), ("tune", 200 + i)):
                stack, gt = work / f"{name}_{role}.tif", work / f"{name}_{role}.csv"
                simulate_stack(sim, args.frames, stack, gt, seed=seed)
                paths[role] = (stack, read_localizations(gt, pixel_size=px))
            # Picasso: tune on the tuning stack, then run the chosen settings on the test stack
            pic_table, info = tuned_picasso(python, paths["tune"], paths["test"][0], camera, px, work)
            box, ng, jac_tune, pic_s = info["box"], info["ng"], info["jaccard_tune"], info["seconds"]
            pic = evaluate(pic_table, paths["test"][1], pixel_size=px)
            # decode_mem: the shipped model, default post-processing
            dec_table, dec_s = run_decode(paths["test"][0], Path(args.model))
            dec = evaluate(dec_table, paths["test"][1], pixel_size=px)
            others = {}  # the other models on the same test stack: the wide generalist, the earlier narrow one
            for key, path in (("wide", args.wide), ("narrow", args.narrow)):
                if path and Path(path).is_file():
                    table, seconds = run_decode(paths["test"][0], Path(path))
                    others[key] = dict(m=evaluate(table, paths["test"][1], pixel_size=px).as_dict(), s=seconds,
                                       n=len(table), path=path)
            rows.append(dict(name=name, density=density, n_gt=len(paths["test"][1]), box=box, ng=ng,
                             jac_tune=jac_tune, pic=pic.as_dict(), dec=dec.as_dict(), pic_s=pic_s, dec_s=dec_s,
                             pic_n=len(pic_table), dec_n=len(dec_table), **others))
            print(f"{name}: decode_mem J={dec.jaccard:.3f} RMSE={dec.rmse_lat:.1f} nm"
                  + "".join(f" | {k} J={o['m']['jaccard']:.3f} RMSE={o['m']['rmse_lat']:.1f} nm"
                            for k, o in others.items())
                  + f" | Picasso (box {box}, ng {ng:.0f}) J={pic.jaccard:.3f} RMSE={pic.rmse_lat:.1f} nm", flush=True)
    total = time.perf_counter() - t_all
    write_report(Path(args.out), rows, args, python, total)
    return 0


# ------------------------------------------------------------------------------------------------ report

def _versions(python: str) -> str:

    return f"numpy {np.__version__}; {picasso_version(python)}"


def write_report(out: Path, rows: list[dict], args: argparse.Namespace, python: str, total: float) -> None:
    from decode_mem.io.atomic import atomic_output

    out.parent.mkdir(parents=True, exist_ok=True)
    png = out.with_suffix(".png")
    _plot(rows, png)

    def f(v: float | None, d: int = 3) -> str:
        return "n/a" if v is None or v != v else f"{v:.{d}f}"

    lines = [
        "# Accuracy: decode_mem (shipped model, the wide one and the earlier narrow one) vs Picasso (identify + LQ "
        "Gaussian fit)",
        "",
        f"Command: `{command_line()}` "
        f"(total {total / 60:.1f} min).",
        f"Machine: {machine_line('1 thread per method (torch / numba)')} (shared with other jobs); "
        f"{_versions(python)}.",
        f"Model: `{Path(args.model).relative_to(ROOT) if Path(args.model).is_relative_to(ROOT) else args.model}`.",
        "",
        f"Data: {args.frames} frames of 64×64 px, 100 nm pixels, σ_PSF = 1 px, photons N(5000, 1500) per frame "
        "with blinking (mean on-time 2 frames), background 100 photons/px, EMCCD (baseline 100, 45 e⁻/ADU, "
        "EM gain 300, QE 0.9, read noise 74.4 e⁻). Both methods on the same test frames; all ground truth counted "
        "(edge and dim emitters too); matching within 250 nm, optimal assignment per frame. Picasso's box and "
        "minimum net gradient were tuned for the best Jaccard on a separate tuning stack (other seed) of the same "
        "density. Speed: localizations written per second of wall time (decode_mem: read + tiled inference + "
        "post-processing; Picasso: identify + spot cutting + fit), after a warm-up (numba compile).",
        "",
        "| density (/µm²) | method | Jaccard | goal | recall | precision | RMSE lat (nm) | efficiency lat (%) "
        "| localizations | loc/s | frames/s | settings |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d, p = r["dec"], r["pic"]
        lines.append(f"| {r['density']:g} ({r['name']}) | decode_mem | {f(d['jaccard'])} | ≥ {GOALS[r['name']]:.2f} "
                     f"| {f(d['recall'])} | {f(d['precision'])} | {f(d['rmse_lat'], 1)} | {f(d['efficiency_lat'], 1)} "
                     f"| {r['dec_n']} | {r['dec_n'] / r['dec_s']:.0f} | {args.frames / r['dec_s']:.0f} "
                     "| default post-processing |")
        for key, label in (("wide", "decode_mem, wide model"), ("narrow", "decode_mem, earlier narrow model")):
            if r.get(key):
                n = r[key]
                goal = f"≥ {WIDE_GOALS[r['name']]:.2f}" if key == "wide" else ""
                lines.append(f"| {r['density']:g} ({r['name']}) | {label} | "
                             f"{f(n['m']['jaccard'])} | {goal} "
                             f"| {f(n['m']['recall'])} | {f(n['m']['precision'])} "
                             f"| {f(n['m']['rmse_lat'], 1)} | {f(n['m']['efficiency_lat'], 1)} | {n['n']} "
                             f"| {n['n'] / n['s']:.0f} | {args.frames / n['s']:.0f} | `{Path(n['path']).name}` |")
        lines.append(f"| {r['density']:g} ({r['name']}) | Picasso | {f(p['jaccard'])} | | {f(p['recall'])} "
                     f"| {f(p['precision'])} | {f(p['rmse_lat'], 1)} | {f(p['efficiency_lat'], 1)} | {r['pic_n']} "
                     f"| {r['pic_n'] / r['pic_s']:.0f} | {args.frames / r['pic_s']:.0f} "
                     f"| box {r['box']}, min ng {r['ng']:.0f} (tuning J {r['jac_tune']:.3f}) |")
    met_j = [r["name"] for r in rows if r["dec"]["jaccard"] >= GOALS[r["name"]]]
    met_r = [r["name"] for r in rows if r["dec"]["rmse_lat"] < r["pic"]["rmse_lat"]]
    lines += [
        "",
        "Ground-truth emitters per test stack: " + ", ".join(f"{r['name']} {r['n_gt']}" for r in rows) + ".",
        "",
        "## Goals",
        "",
        f"- Jaccard ≥ 0.90 / 0.85 / 0.80: met at {', '.join(met_j) or 'no density'}{_missed(rows, met_j)}.",
        f"- Lateral RMSE below Picasso's: {', '.join(met_r) or 'no density'}{_missed(rows, met_r)}.",
        *(["- Shipped model within 0.02 Jaccard of the earlier narrow model (trained on exactly this physics): "
           + ", ".join(f"{r['name']} {r['dec']['jaccard'] - r['narrow']['m']['jaccard']:+.3f} "
                       f"({'yes' if r['dec']['jaccard'] >= r['narrow']['m']['jaccard'] - 0.02 else 'no'})"
                       for r in rows)] if all(r.get("narrow") for r in rows) else []),
        *(_wide_goals(rows) if all(r.get("wide") for r in rows) else []),
        "",
        "## Not measured",
        "",
        "- GPU speed (no GPU here); Picasso's MLE and GPU fitters; 3D (astigmatic) data; real data.",
        "- Picasso boxes tried: 3, 5, 7, 9 (odd, as Picasso requires); thresholds: 80 values, geometric from "
        f"{NG_FLOOR:g} ADU.",
        "- Picasso's multi-threaded identify and fitting (both methods ran on one thread on a shared machine, so the",
        "  loc/s column compares single-thread throughput only).",
        "",
        f"![accuracy]({png.name})",
        "",
    ]
    with atomic_output(out) as tmp:
        tmp.write_text("\n".join(lines))
    print(f"wrote {out} and {png}")


def _wide_goals(rows: list[dict]) -> list[str]:
    """The wide model's goals (issue 49), computed from the table: its own Jaccard goals, a lower RMSE than the
    small model's, and the margin over the small model that decides whether it ships (≥ 0.01 at 1 and 2/µm²)."""
    met = [r["name"] for r in rows if r["wide"]["m"]["jaccard"] >= WIDE_GOALS[r["name"]]]
    sharper = [r["name"] for r in rows if r["wide"]["m"]["rmse_lat"] < r["dec"]["rmse_lat"]]
    gains = {r["name"]: r["wide"]["m"]["jaccard"] - r["dec"]["jaccard"] for r in rows}
    ships = all(gains[n] >= SHIP_MARGIN for n in ("medium", "high") if n in gains)
    return [
        f"- Wide model Jaccard ≥ 0.95 / 0.92 / 0.90: met at {', '.join(met) or 'no density'}{_missed(rows, met)}.",
        f"- Wide model's lateral RMSE below the small model's: {', '.join(sharper) or 'no density'}"
        f"{_missed(rows, sharper)}.",
        "- Wide minus small model, Jaccard: " + ", ".join(f"{n} {g:+.3f}" for n, g in gains.items())
        + f"; ≥ {SHIP_MARGIN} at 1 and 2/µm² (the wide model is shipped only then): {'yes' if ships else 'no'}.",
    ]


def _missed(rows: list[dict], met: list[str]) -> str:
    missed = [r["name"] for r in rows if r["name"] not in met]
    return f"; not met at {', '.join(missed)}" if missed else ""


def _plot(rows: list[dict], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3)
    x = np.arange(len(rows))
    labels = [f"{r['density']:g}/µm²" for r in rows]
    for ax, key, title in ((axes[0], "jaccard", "Jaccard (higher is better)"),
                           (axes[1], "rmse_lat", "lateral RMSE [nm] (lower is better)"),
                           (axes[2], "efficiency_lat", "efficiency lateral [%]")):
        bars = [("decode_mem, small model", [r["dec"][key] for r in rows], "#1f77b4")]
        if all(r.get("wide") for r in rows):
            bars.append(("decode_mem, wide model", [r["wide"]["m"][key] for r in rows], "#17becf"))
        bars.append(("Picasso LQ", [r["pic"][key] for r in rows], "#ff7f0e"))
        width = 0.8 / len(bars)
        for k, (label, values, color) in enumerate(bars):
            ax.bar(x + (k - (len(bars) - 1) / 2) * width, values, width, label=label, color=color)
        ax.set_xticks(x, labels)
        ax.set_title(title, fontsize="medium")
        ax.grid(axis="y", alpha=0.3)
    first = -0.4 + 0.4 / len(bars)  # the small model's bars carry its goals
    axes[0].scatter(x + first, [GOALS[r["name"]] for r in rows], marker="_", s=300, linewidths=2, color="k",
                    label="goal", zorder=3)
    if len(bars) == 3:
        axes[0].scatter(x, [WIDE_GOALS[r["name"]] for r in rows], marker="_", s=300, linewidths=2,
                        color="#8c564b", label="wide model's goal", zorder=3)
    axes[0].set_ylim(0, 1)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncol=len(names), fontsize="small")
    fig.savefig(path, format="png", dpi=100)


if __name__ == "__main__":
    sys.exit(main())
