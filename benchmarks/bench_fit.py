"""``fit`` (calibrate -> fine-tune within a time budget -> localize) vs the shipped generalist vs tuned Picasso.

    python benchmarks/bench_fit.py            # writes benchmarks/results/fit.md + .png

On physics variants of the generalization benchmark (``bench_generalize.VARIANTS``), ``decode_mem.fit`` gets only
the movie and its camera (what a user has): it calibrates the movie, fine-tunes the shipped generalist on
matched simulations for each CPU budget (``--budgets``, minutes of wall time, 1 torch thread), and localizes the
movie; the same test movie goes through the shipped generalist and through Picasso (box and threshold tuned on a
separate movie of the same physics). Matching within 250 nm, optimal. Every number below comes from this run.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_generalize import VARIANTS, run_decode, simulation
from command_line import command_line
from machine import commit, load_average, machine_line
from picasso_runner import camera_settings, find_picasso_python, picasso_version, tuned_picasso

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_VARIANTS = ("PSF a third wider", "sCMOS, dim, low background", "sCMOS 160 nm, cell, bleaching")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=200)
    p.add_argument("--budgets", type=float, nargs="+", default=[5.0, 15.0], help="fit budgets in minutes")
    p.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS))
    p.add_argument("--model", default=str(ROOT / "data" / "models" / "default_2d.pt"), help="the generalist")
    p.add_argument("--picasso-python", help="interpreter with picassosr (see picasso_runner.py)")
    p.add_argument("--without-maps", action="store_true",
                   help="hand fit and the generalist the camera without its per-pixel sCMOS maps (a user who has none)")
    p.add_argument("--out", default=str(RESULTS / "fit.md"))
    args = p.parse_args(argv)

    import torch

    from decode_mem.config import load_yaml
    from decode_mem.evaluate import evaluate
    from decode_mem.fit import FitConfig, fit_movies
    from decode_mem.io.camera import Camera
    from decode_mem.io.localizations import read_localizations
    from decode_mem.simulate.stack import simulate_stack

    torch.set_num_threads(1)
    python = find_picasso_python(args.picasso_python)
    rows = []
    t_all = time.perf_counter()
    load_start, at = load_average(), commit()
    with tempfile.TemporaryDirectory(prefix="bench_fit_") as tmp:
        work = Path(tmp)
        names = list(VARIANTS)
        for name in args.variants:
            i = names.index(name)
            sim = simulation(VARIANTS[name])
            px = sim.camera.pixel_size
            movies = {}
            for role, seed in (("test", 500 + i), ("tune", 600 + i)):
                stack, gt = work / f"v{i}_{role}.tif", work / f"v{i}_{role}.csv"
                result = simulate_stack(sim, args.frames, stack, gt, seed=seed, camera_out=work / f"v{i}_{role}.yaml")
                movies[role] = (stack, read_localizations(gt, pixel_size=px), result.camera)
            cam_yaml = movies["test"][2]
            camera = Camera.from_dict(load_yaml(cam_yaml, section="camera"), base_dir=cam_yaml.parent)
            if args.without_maps:
                camera = camera.without_maps()
            gt = movies["test"][1]
            row = {"name": name, "n_gt": len(gt), "fits": []}
            table, _ = run_decode(movies["test"][0], Path(args.model), camera)
            row["generalist"] = evaluate(table, gt, pixel_size=px).as_dict()
            for budget in args.budgets:
                out = work / f"v{i}_fit_{budget:g}"
                report = fit_movies(FitConfig(movies=(str(movies["test"][0]),), out=str(out), camera=camera,
                                              budget_minutes=budget, train="always", base_model=args.model,
                                              threads=1, device="cpu"))
                fitted = read_localizations(out / f"{movies['test'][0].stem}.csv", pixel_size=px)
                row["fits"].append({"budget": budget, "steps": report.train_steps, "minutes": report.train_minutes,
                                    "decision": report.decision, "validation": report.validation,
                                    "metrics": evaluate(fitted, gt, pixel_size=px).as_dict()})
            if python is not None:
                pic_table, info = tuned_picasso(python, movies["tune"][:2], movies["test"][0],
                                                camera_settings(camera.without_maps()), px, work)
                row["picasso"] = evaluate(pic_table, gt, pixel_size=px).as_dict()
                row["picasso_info"] = info
            rows.append(row)
            print(f"{name}: generalist J={row['generalist']['jaccard']:.3f}; "
                  + "; ".join(f"fit {f['budget']:g} min J={f['metrics']['jaccard']:.3f}" for f in row["fits"])
                  + (f"; Picasso J={row['picasso']['jaccard']:.3f}" if "picasso" in row else ""), flush=True)
    picasso = picasso_version(python) if python else "Picasso: not installed"
    machine = f"{machine_line(1, load_start=load_start, at=at)}; {picasso}"
    write_report(Path(args.out), rows, args, machine, time.perf_counter() - t_all)
    return 0


def write_report(out: Path, rows: list[dict], args: argparse.Namespace, machine: str, total: float) -> None:
    from decode_mem.io.atomic import atomic_output
    from decode_mem.model.checkpoint import load_model

    def f(v: float | None, d: int = 3) -> str:
        return "–" if v is None or not np.isfinite(v) else f"{v:.{d}f}"

    lines = [
        "# fit: calibrate + fine-tune within a CPU budget, vs the shipped generalist and tuned Picasso",
        "",
        f"Command: `{command_line()}`; {total / 60:.1f} min in all.",
        f"Machine: {machine}.",
        f"Base model (the shipped generalist, fine-tuned by fit): `{Path(args.model).name}`, trained "
        f"{load_model(args.model).step} steps.",
        *(["", "**Cameras without their per-pixel maps** (`--without-maps`): fit and the generalist get only the "
            "camera's scalars, as a user without calibration maps has."] if args.without_maps else []),
        "",
        __doc__.split("\n\n", 2)[2].strip(),
        "",
        "| physics | GT | method | Jaccard | recall | precision | RMSE lat (nm) | eff. lat (%) | notes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        entries = [("shipped generalist", r["generalist"], "")]
        for fit in r["fits"]:
            val = fit["validation"]
            note = (f"{fit['steps']} steps in {fit['minutes']:.1f} min; {fit['decision']}; held-out matched windows: "
                    + ", ".join(f"{k} J {v['jaccard']:.3f}" for k, v in val.items()))
            entries.append((f"fit, {fit['budget']:g} min", fit["metrics"], note))
        if "picasso" in r:
            i = r["picasso_info"]
            entries.append(("Picasso (tuned)", r["picasso"], f"box {i['box']}, min ng {i['ng']:.0f}"))
        for method, m, note in entries:
            lines.append(f"| {r['name']} | {r['n_gt']} | {method} | {f(m['jaccard'])} | {f(m['recall'])} "
                         f"| {f(m['precision'])} | {f(m['rmse_lat'], 1)} | {f(m['efficiency_lat'], 1)} | {note} |")
    ahead = [r["name"] for r in rows if "picasso" in r and r["fits"]
             and max(x["metrics"]["jaccard"] for x in r["fits"]) > r["picasso"]["jaccard"]]
    lines += [
        "",
        "## Goals (computed from the table)",
        "",
        f"- fit ahead of tuned Picasso (best budget): {len(ahead)} of {sum('picasso' in r for r in rows)} variants.",
        "- Within 0.02 Jaccard of a specialist trained on the true physics until its validation stops improving: "
        "`specialist.md` (`python benchmarks/bench_specialist.py`, which reads this run's `fit.json`).",
        "- GPU budgets: **not measured** (no GPU on this machine).",
    ]
    png = out.with_suffix(".png")
    _plot(rows, png)
    lines += ["", f"![fit]({png.name})", ""]
    with atomic_output(out) as tmp:
        tmp.write_text("\n".join(lines))
    write_record(out, rows, args.frames)
    print(f"wrote {out}, {out.with_suffix('.json').name} and {png}")


def write_record(out: Path, rows: list[dict], frames: int, **measured: object) -> None:
    """The report's rows beside it as ``<out>.json`` (the command, movie length and ``measured``, e.g. the
    machine line, with them), for another benchmark to read (``bench_specialist.py`` reads ``fit.json``)."""
    from decode_mem.io.atomic import atomic_output

    with atomic_output(out.with_suffix(".json")) as tmp:
        record = {"command": command_line(), "frames": frames, "rows": rows, **measured}
        tmp.write_text(json.dumps(record, indent=1, default=float))


def _plot(rows: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    from decode_mem.io.atomic import atomic_output

    fig = Figure(figsize=(10, 4.5))
    ax = fig.subplots()
    x = np.arange(len(rows))
    methods = ["generalist"] + [f"fit {b['budget']:g} min" for b in (rows[0]["fits"] if rows else [])] + ["picasso"]
    width = 0.8 / max(len(methods), 1)
    for k, method in enumerate(methods):
        vals = []
        for r in rows:
            if method == "generalist":
                vals.append(r["generalist"]["jaccard"])
            elif method == "picasso":
                vals.append(r["picasso"]["jaccard"] if "picasso" in r else np.nan)
            else:
                vals.append(r["fits"][k - 1]["metrics"]["jaccard"])
        ax.bar(x + (k - (len(methods) - 1) / 2) * width, vals, width, label=method)
    ax.set_xticks(x, [r["name"] for r in rows], fontsize=8)
    ax.set(ylabel="Jaccard", ylim=(0, 1), title="fit vs generalist vs tuned Picasso")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")


if __name__ == "__main__":
    raise SystemExit(main())
