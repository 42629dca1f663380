"""The physics a 3-D fit is matched to: from the spots (the calibration) or from the pixels' cumulants and the PSF.

    python benchmarks/bench_crowding.py                 # results/crowding.md + .png (~35 min on 2 cores)
    python benchmarks/bench_crowding.py --quick --out /tmp/crowding.md

1. **Estimates.** ``bench_3d``'s aberrated astigmatic and double-helix pupil PSFs, movies of 64² px x 100 frames
   (default EMCCD, background 50 photons/px, lognormal flux of mean 5000 photons) at 0.3, 1 and 2 emitters/µm²
   with the flux spread (0.3) and on-time (2 frames) that ``calibrate.crowding`` assumes for the photons' shape,
   and movies unlike it (spread 0.1 and 0.6, on-time 4 frames). Each is calibrated (``calibrate_movie``, its 100
   frames) and the density, median flux and background are compared with the truth: the calibration's (from the
   spots it finds and fits with a Gaussian) and ``crowded_physics``'s (the pixels' cumulants with the true PSF over
   the movie's z range, and over the wider range of a bead calibration's spline, -640 to 640 nm, as ``fit`` uses).
2. **Fits.** For each PSF, ``bench_3d``'s setup (10 simulated beads -> ``psf.h5``; movies at 1, 0.3, 2 /µm², 200
   frames; the first calibrated) and ``fit --psf`` with a budget of ``--budget`` minutes (1 torch thread), three
   ways: matched to the calibration alone (``fit.core._crowded_physics`` made to decline: what fit did before
   ``calibrate.crowding``), to the calibration with the pixels' cumulants (what fit does now), and to the movie's
   true physics (density 1 /µm², background 50, flux median and spread of the simulation): the upper bound of
   better matching. Jaccard and RMSE on the three movies (``decode_mem.evaluate``, as ``bench_3d``).

Every number comes from the run that wrote the report.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_3d import MOVIE_DENSITIES, PSFS, bead_stack, movie_config
from command_line import command_line
from machine import commit, load_average, machine_line
from report_files import write_report_files

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
CASES = ("astigmatic + spherical + coma", "double helix")
VARIANTS = [(0.3, 2.0, 0.3), (0.3, 2.0, 1.0), (0.3, 2.0, 2.0), (0.1, 2.0, 1.0), (0.6, 2.0, 2.0), (0.3, 4.0, 2.0)]
WIDE_Z = (-640.0, 640.0)
MOVIE_Z, SPLINE_Z = "pixels, movie's z", "pixels, spline's z"
ARMS = ("calibration alone", "with the pixels' cumulants", "true physics")
FLUX_MEAN, FLUX_REL, BG = 5000.0, 0.3, 50.0


def estimates_row(name: str, rel: float, on_time: float, density: float, frames: int) -> dict:
    from decode_mem.calibrate import calibrate_movie
    from decode_mem.calibrate.crowding import crowded_physics
    from decode_mem.simulate import simulate_movie

    pupil, z_range, _ = PSFS[name]
    cfg = replace(movie_config(pupil, z_range, density), photons_std=rel * FLUX_MEAN, on_time=on_time)
    adu, gt, _ = simulate_movie(cfg, frames, seed=5)
    cal = calibrate_movie(adu, cfg.camera, frames=frames)
    e = {k: v.value for k, v in cal.estimates.items()}
    area = adu.shape[1] * adu.shape[2] * (cfg.camera.pixel_size / 1000) ** 2
    truth = {"density": len(gt["photons"]) / frames / area, "flux": FLUX_MEAN * math.exp(-math.log1p(rel**2) / 2),
             "bg": BG}
    row = {"psf": name, "spread": rel, "on_time": on_time, "density": density, "truth": truth,
           "calibration": {"density": e["density_per_um2"], "flux": e["flux_median"], "bg": e["background_photons"]}}
    for label, zr in ((MOVIE_Z, z_range), (SPLINE_Z, WIDE_Z)):
        p = crowded_physics(e, cfg.camera.pixel_size, replace(cfg, z_range=zr).spline_psf(), zr)
        row[label] = ({"density": p.density_per_um2, "flux": p.flux_median, "bg": p.background_photons}
                      if p is not None else None)
    return row


def fit_job(name: str, arm: str, budget: float, frames: int, work: str) -> dict:
    """One ``fit --psf`` on ``bench_3d``'s setup for ``name``, matched as ``arm`` says; its scores."""
    import torch

    import decode_mem.fit.core as core
    from decode_mem.evaluate import evaluate
    from decode_mem.fit import FitConfig, fit_movies
    from decode_mem.io.localizations import read_localizations
    from decode_mem.io.psf_file import write_psf
    from decode_mem.psf.beads import BeadSettings, calibrate_beads
    from decode_mem.simulate.stack import simulate_stack

    torch.set_num_threads(1)
    k = CASES.index(name)
    pupil, z_range, _ = PSFS[name]
    case = Path(work) / f"psf{k}"
    case.mkdir(parents=True, exist_ok=True)
    if arm == ARMS[0]:
        core._crowded_physics = lambda *a: (None, {"note": "not used: bench_crowding's arm 'calibration alone'"})
    elif arm == ARMS[2]:
        matched = core.matched_3d

        def truth(estimates, camera, psf):
            true = {"density_per_um2": 1.0, "background_photons": BG, "flux_median": FLUX_MEAN * math.exp(
                -math.log1p(FLUX_REL**2) / 2), "flux_log_sd": math.sqrt(math.log1p(FLUX_REL**2))}
            clean = {k: v for k, v in estimates.items() if not k.startswith("background_photons_")}
            return matched({**clean, **true}, camera, psf)

        core.matched_3d = truth
    _planes, step = bead_stack(pupil, case / "beads.tif", seed=100 + k)
    camera = movie_config(pupil, z_range, MOVIE_DENSITIES[0]).camera
    cal = calibrate_beads([str(case / "beads.tif")], camera, BeadSettings(z_step=step, roi=25))
    write_psf(case / "psf.h5", cal.spline)
    movies, gts = [], []
    for j, density in enumerate(MOVIE_DENSITIES):
        res = simulate_stack(movie_config(pupil, z_range, density), frames, case / f"movie_{j}.tif",
                             case / f"gt_{j}.csv", seed=1000 * k + j)
        movies.append(str(res.out))
        gts.append(read_localizations(res.gt, pixel_size=camera.pixel_size))
    report = fit_movies(FitConfig(movies=tuple(movies), out=str(case / "fit"), camera=camera, psf=str(case / "psf.h5"),
                                  budget_minutes=budget, threads=1, val_windows=256, seed=k))
    scores = []
    for j, density in enumerate(MOVIE_DENSITIES):
        pred = read_localizations(case / "fit" / f"movie_{j}.csv", pixel_size=camera.pixel_size)
        m = evaluate(pred, gts[j], pixel_size=camera.pixel_size).as_dict()
        scores.append({"density": density, **{key: m[key] for key in ("jaccard", "recall", "precision", "rmse_lat",
                                                                       "rmse_ax", "efficiency_vol")}})
    return {"psf": name, "arm": arm, "steps": report.train_steps, "scores": sorted(scores, key=lambda s: s["density"]),
            "pixel_statistics": report.pixel_statistics}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=10.0, help="fit --budget_minutes per fit")
    p.add_argument("--frames", type=int, default=200, help="frames per fitted movie")
    p.add_argument("--workers", type=int, default=2, help="fits at once (1 torch thread each)")
    p.add_argument("--quick", action="store_true", help="one estimate row, 0.3-min fits: checks the script runs")
    p.add_argument("--out", default=str(RESULTS / "crowding.md"))
    args = p.parse_args(argv)
    if args.quick:
        args.budget, args.frames = 0.3, 20
    at, load_start, t0 = commit(), load_average(), time.perf_counter()
    variants = VARIANTS[1:2] if args.quick else VARIANTS
    rows = [estimates_row(name, *v, frames=100) for name in CASES for v in variants]
    with tempfile.TemporaryDirectory(prefix="bench_crowding_") as tmp, \
            ProcessPoolExecutor(max_workers=args.workers, max_tasks_per_child=1) as pool:  # an arm patches fit
        jobs = [pool.submit(fit_job, name, arm, args.budget, args.frames, str(Path(tmp) / f"{i}"))
                for i, (name, arm) in enumerate((n, a) for n in CASES for a in ARMS)]
        fits = [j.result() for j in jobs]
    machine = machine_line(f"1 per fit, {args.workers} fits at once", load_start=load_start, at=at)
    write_report(Path(args.out), rows, fits, args, machine, time.perf_counter() - t0, command_line(argv))
    return 0


def write_report(out: Path, rows: list[dict], fits: list[dict], args, machine: str, total: float,
                 command: str) -> None:
    def cell(est: dict | None, truth: dict) -> str:
        if est is None:
            return "none"
        return " / ".join(f"{est[k] / truth[k]:.2f}" for k in ("density", "flux", "bg"))

    lines = ["# The physics a 3-D fit is matched to: from the spots or from the pixels", "",
             f"Command: `{command}`; {total / 60:.1f} min in all." + (" **--quick: a check that the script runs, "
                                                                     "not a result.**" if args.quick else ""),
             f"Machine: {machine}.", "", __doc__.split("\n\n", 2)[2].rsplit("\n\n", 1)[0].strip(), "",
             "## 1. Estimates over truth (density / median flux / background; 1.00 is right)", "",
             "| PSF | flux spread | on-time | emitters/µm² | calibration (spots) | pixels, movie's z | "
             "pixels, spline's z |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        movie_z, spline_z = r[MOVIE_Z], r[SPLINE_Z]
        lines.append(f"| {r['psf']} | {r['spread']:g} | {r['on_time']:g} | {r['density']:g} | "
                     f"{cell(r['calibration'], r['truth'])} | {cell(movie_z, r['truth'])} | "
                     f"{cell(spline_z, r['truth'])} |")
    lines += ["", f"## 2. fit --psf with {args.budget:g}-minute budgets, matched three ways", "",
              "Per density (0.3, 1, 2 /µm²): Jaccard (recall, precision), lateral/axial RMSE in nm, and the 2016 "
              "challenge's 3-D efficiency (Jaccard and RMSE in one number).", "",
              "| PSF | matched to | steps | " + " | ".join(f"{d:g}/µm²: J (R, P) · RMSE · eff"
                                                        for d in sorted(MOVIE_DENSITIES)) + " |",
              "|---|---|---|" + "---|" * 3]
    for f in fits:
        s = f["scores"]
        lines.append(f"| {f['psf']} | {f['arm']} | {f['steps']} | " + " | ".join(
            f"{x['jaccard']:.3f} ({x['recall']:.2f}, {x['precision']:.2f}) · {x['rmse_lat']:.0f}/{x['rmse_ax']:.0f} · "
            f"{x['efficiency_vol']:.1f}" for x in s) + " |")
    for name in CASES:
        by = {f["arm"]: f for f in fits if f["psf"] == name}
        pairs = list(zip(by[ARMS[0]]["scores"], by[ARMS[1]]["scores"], strict=True))
        gain = ", ".join(f"{b['jaccard'] - a['jaccard']:+.3f}" for a, b in pairs)
        eff = ", ".join(f"{b['efficiency_vol'] - a['efficiency_vol']:+.1f}" for a, b in pairs)
        lines.append("")
        lines.append(f"- {name}: the pixels' cumulants changed Jaccard by {gain} and the 3-D efficiency by {eff} "
                     f"(0.3, 1, 2 /µm²); what fit measured: {by[ARMS[1]]['pixel_statistics']}")
    write_report_files(out, lines, lambda path: _plot(fits, path),
                       {"command": command, "machine": machine, "estimates": rows, "fits": fits})
    print(f"wrote {out}")


def _plot(fits: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    from decode_mem.report.figures import png_bytes

    fig = Figure(figsize=(10, 4))
    axes = fig.subplots(1, len(CASES), sharey=True)
    for ax, name in zip(np.atleast_1d(axes), CASES, strict=True):
        for i, arm in enumerate(ARMS):
            f = next(x for x in fits if x["psf"] == name and x["arm"] == arm)
            ax.plot([s["density"] for s in f["scores"]], [s["jaccard"] for s in f["scores"]], "o-", color=f"C{i}",
                    label=arm)
        ax.set(title=name, xlabel="emitters / µm²", ylabel="Jaccard")
        ax.legend(fontsize=8)
    path.write_bytes(png_bytes(fig))


if __name__ == "__main__":
    sys.exit(main())
