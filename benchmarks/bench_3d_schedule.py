"""The 3-D fit's learning-rate schedule: constant (as ``bench_3d`` ran it) against a linear decay over the budget.

    python benchmarks/bench_3d.py --work W ...            # first (or at the same time): data + the constant-rate fits
    python benchmarks/bench_3d_schedule.py --work W [--lr_decay_to 0.05] [--wait]   # -> results/3d_schedule.md

Reuses ``bench_3d``'s work folder: for each PSF its calibrated ``psf.h5``, its three movies and their ground truth,
and its ``fit`` (constant learning rate, ``fit --budget_minutes``). Runs ``fit_movies`` again on the same movies with
the same budget, seed and threads, with ``lr_decay_to`` (the learning rate falls linearly with the time trained,
``train.lr_decay_to``), into ``<work>/psfK/fit_decay``; then scores both fits' localizations against the ground
truth here (``decode_mem.evaluate``, 250 nm lateral, 500 nm axial, as ``bench_3d``). The constant-rate fits are
``bench_3d``'s (another process, same machine): their time and steps come from their ``fit.json``. ``--wait``:
wait for ``bench_3d`` to have written what a PSF needs (it may still be running). A decayed fit that an earlier run
of this script finished (``fit_decay/fit.json``) is scored again, not fitted again.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench_3d import MOVIE_DENSITIES, PSFS, movie_config

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
NAMES = tuple(PSFS)  # bench_3d's PSF index -> name
DENSITY_OF_MOVIE = dict(enumerate(MOVIE_DENSITIES))  # bench_3d's movie_j -> its density


def wait_for(path: Path, wait: bool) -> None:
    while not path.exists():
        if not wait:
            raise SystemExit(f"{path}: missing (run bench_3d.py --work first, or pass --wait)")
        time.sleep(20)


def camera_of(name: str):
    """The camera bench_3d simulated (and gave ``fit``) for PSF ``name``."""
    pupil, z_range, _ = PSFS[name]
    return movie_config(pupil, z_range, MOVIE_DENSITIES[0]).camera


def score(fit_dir: Path, case: Path, pixel_size: float) -> dict:
    from decode_mem.evaluate import evaluate
    from decode_mem.io.localizations import read_localizations

    report = json.loads((fit_dir / "fit.json").read_text())
    rows = {}
    for j, density in DENSITY_OF_MOVIE.items():
        pred = read_localizations(fit_dir / f"movie_{j}.csv", pixel_size=pixel_size)
        truth = read_localizations(case / f"gt_{j}.csv", pixel_size=pixel_size)
        m = evaluate(pred, truth, pixel_size=pixel_size).as_dict()
        rows[density] = {k: m[k] for k in ("jaccard", "rmse_lat", "rmse_ax", "efficiency_vol")}
    return {"steps": report["train_steps"], "train_minutes": report["train_minutes"],
            "total_s": report.get("budget", {}).get("total_s"), "densities": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True, help="bench_3d's --work folder")
    p.add_argument("--lr_decay_to", type=float, default=0.05)
    p.add_argument("--budget_minutes", type=float, default=30.0, help="as bench_3d ran (default 30)")
    p.add_argument("--psfs", type=int, nargs="+", default=[0, 1, 2], help="bench_3d's PSF indices")
    p.add_argument("--wait", action="store_true", help="wait for bench_3d's files")
    p.add_argument("--out", default=str(RESULTS / "3d_schedule.md"))
    args = p.parse_args(argv)

    import torch
    from command_line import command_line
    from machine import commit, load_average, machine_line

    from decode_mem.fit import FitConfig, fit_movies

    torch.set_num_threads(1)
    load_start, at, t_all = load_average(), commit(), time.perf_counter()
    work = Path(args.work)
    runs = []
    for k in args.psfs:
        case = work / f"psf{k}"
        wait_for(case / "fit" / "calib.yaml", args.wait)  # bench_3d calibrates after writing all three movies
        movies = tuple(str(case / f"movie_{j}.tif") for j in range(3))
        if (case / "fit_decay" / "fit.json").exists():  # finished by an earlier run of this script: scored again
            runs.append({"psf": NAMES[k], "index": k, "reused": True})
            continue
        fit_movies(FitConfig(movies=movies, out=str(case / "fit_decay"), camera=camera_of(NAMES[k]),
                             psf=str(case / "psf.h5"), budget_minutes=args.budget_minutes, threads=1,
                             val_windows=256, seed=k, lr_decay_to=args.lr_decay_to))
        runs.append({"psf": NAMES[k], "index": k})
        print(f"{NAMES[k]}: decayed fit done", flush=True)
    for run in runs:
        case = work / f"psf{run['index']}"
        wait_for(case / "fit" / "fit.json", args.wait)
        pixel_size = camera_of(run["psf"]).pixel_size
        run["constant"] = score(case / "fit", case, pixel_size)
        run["decay"] = score(case / "fit_decay", case, pixel_size)
    machine = machine_line(1, load_start=load_start, at=at)
    write_report(Path(args.out), runs, args, command_line(), machine, time.perf_counter() - t_all)
    return 0


def write_report(out: Path, runs: list[dict], args: argparse.Namespace, command: str, machine: str,
                 seconds: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from decode_mem.io.atomic import atomic_output
    from decode_mem.report.figures import png_bytes

    lines = ["# 3-D fit: constant learning rate vs a linear decay over the budget", "",
             f"Command: `{command}`; {seconds / 60:.1f} min in all.", f"Machine: {machine}.", "",
             f"Each PSF's three movies (bench_3d's work folder `{args.work}`: same movies, PSF file, budget "
             f"{args.budget_minutes:g} min, seed and 1 thread) fitted twice: with the constant learning rate "
             f"bench_3d's run used, and with it falling linearly to {args.lr_decay_to:g}x over the training time "
             "(`fit_movies(..., lr_decay_to=...)`). Both fits' localizations scored here against the ground truth.",
             "", "| PSF | density (/µm²) | schedule | steps | Jaccard | RMSE lat (nm) | RMSE ax (nm) | ax / lat "
             "| eff. 3D (%) |", "|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        for density in sorted(DENSITY_OF_MOVIE.values()):
            for name in ("constant", "decay"):
                r, m = run[name], run[name]["densities"][density]
                lines.append(f"| {run['psf']} | {density:g} | {name} | {r['steps']} | {m['jaccard']:.3f} | "
                             f"{m['rmse_lat']:.1f} | {m['rmse_ax']:.1f} | {m['rmse_ax'] / m['rmse_lat']:.2f} | "
                             f"{m['efficiency_vol']:.1f} |")
    reused = [run["psf"] for run in runs if run.get("reused")]
    if reused:
        lines += ["", f"The decayed fits of {', '.join(reused)} were made by an earlier run of this script in the "
                  "same work folder (stopped after them; the package code unchanged since) and are scored here."]
    lines += ["", "## Differences (decay minus constant)", ""]
    wins = 0
    for run in runs:
        wins += sum(run["decay"]["densities"][d]["jaccard"] > run["constant"]["densities"][d]["jaccard"]
                    for d in DENSITY_OF_MOVIE.values())
        new, old = run["decay"]["densities"], run["constant"]["densities"]
        diffs = [f"{d:g}/µm²: Jaccard {new[d]['jaccard'] - old[d]['jaccard']:+.3f}, "
                 f"RMSE ax {new[d]['rmse_ax'] - old[d]['rmse_ax']:+.1f} nm" for d in sorted(DENSITY_OF_MOVIE.values())]
        lines.append(f"- {run['psf']}: " + "; ".join(diffs))
    lines += ["", f"- The decay gives the higher Jaccard in {wins} of {3 * len(runs)} movies."]
    lines += ["", f"![3d_schedule]({out.with_suffix('.png').name})", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(out) as tmp:
        tmp.write_text("\n".join(lines))
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for run in runs:
        ds = sorted(DENSITY_OF_MOVIE.values())
        for name, style in (("constant", "--"), ("decay", "-")):
            m = run[name]["densities"]
            axes[0].plot(ds, [m[d]["jaccard"] for d in ds], style, marker="o", label=f"{run['psf']}, {name}")
            axes[1].plot(ds, [m[d]["rmse_ax"] for d in ds], style, marker="o")
    axes[0].set(xlabel="density (/µm²)", ylabel="Jaccard")
    axes[1].set(xlabel="density (/µm²)", ylabel="axial RMSE (nm)")
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    with atomic_output(out.with_suffix(".png")) as tmp:
        tmp.write_bytes(png_bytes(fig, dpi=110))
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
