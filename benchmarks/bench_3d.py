"""3-D with the user's own PSF: decode_mem (``psf`` -> ``fit --psf``) against Picasso's astigmatic 3-D.

    python benchmarks/bench_3d.py                          # writes benchmarks/results/3d.md + .png (hours on a CPU)
    python benchmarks/bench_3d.py --quick --out /tmp/3d.md  # a few minutes: checks that the script runs

For each PSF (scalar pupil models that a Gaussian does not describe: astigmatism with spherical aberration and
coma, and a double-helix mask that Picasso has no model for), a bead z-stack (10 beads, 20 nm planes over
±700 nm) and movies at three densities are simulated with the same PSF and EMCCD camera. decode_mem calibrates
the beads into a spline (``decode_mem.psf.calibrate_beads``) and runs ``fit --psf`` on the movies within a CPU
budget (1 torch thread): one 3-D model per PSF, trained on matched simulations of the middle-density movie,
localizes the three movies. Picasso fits the same beads with its Gaussian (identify + LQ fit, free σx/σy),
calibrates z (``zfit.calibrate_z``: 6th-order polynomials of σx, σy) and localizes the movies (identify + LQ fit +
``zfit``); its box, minimum net gradient and z offset (Picasso puts z = 0 where σx = σy) are tuned on a separate
movie of the middle density against its ground truth. Matching: 250 nm lateral, 500 nm axial, optimal
(``decode_mem.evaluate``); efficiencies as the 2016 SMLM challenge. Every number comes from this run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = ROOT / "benchmarks" / "results"
PSFS = {  # name -> (pupil settings, z range of the movies in nm, Picasso applies)
    "astigmatic + spherical + coma": ({"astigmatism": 0.1, "spherical": 0.04, "coma": 0.02}, (-400.0, 400.0), True),
    "astigmatic, strong spherical": ({"astigmatism": 0.08, "spherical": -0.06, "coma": 0.03}, (-400.0, 400.0), True),
    "double helix": ({"astigmatism": 0.0, "helix_zones": 4}, (-500.0, 500.0), False),
}
DENSITIES = (0.3, 1.0, 2.0)  # emitters / µm² / frame
MOVIE_DENSITIES = (DENSITIES[1], DENSITIES[0], DENSITIES[2])  # movie_j's density: the first (calibrated) is the middle
BOXES = (7, 9)
NG_FLOOR = 300.0


def movie_config(pupil: dict, z_range: tuple[float, float], density: float):
    from decode_mem.simulate import SimulationConfig

    return SimulationConfig.from_dict({
        "frame_size": [64, 64], "density": density, "photons_mean": 5000.0, "photons_std": 1500.0, "bg": 50.0,
        "on_time": 2.0, "psf": "pupil", "pupil": pupil, "z_range": list(z_range), "camera": "emccd",
        "margin": 6.0})


def bead_stack(pupil: dict, path: Path, seed: int) -> tuple[np.ndarray, float]:
    """10 beads at 20 nm planes over ±700 nm -> ``path``; returns (planes, z_step)."""
    from dataclasses import replace

    import tifffile

    from decode_mem.simulate.beads import simulate_bead_stack

    cfg = replace(movie_config(pupil, (-760.0, 760.0), 0.0), frame_size=(96, 160))
    rng = np.random.default_rng(seed)
    gx, gy = np.meshgrid(np.arange(5) * 30 + 20, np.arange(2) * 46 + 25)
    x, y = gx.ravel() + rng.uniform(-0.5, 0.5, 10), gy.ravel() + rng.uniform(-0.5, 0.5, 10)
    z = np.arange(-700.0, 700.1, 20.0)
    tifffile.imwrite(path, simulate_bead_stack(cfg, x, y, z, photons=30000.0, bg=30.0,
                                               offset=rng.normal(0, 10, 10), seed=seed))
    return z, 20.0


def width_error(pupil: dict, cal, z_range: tuple[float, float]) -> float:
    """Largest relative error of the calibrated PSF's Gaussian width (x and y) against the true PSF's over the
    movies' z range (both measured alike on the averaged volume's grid)."""
    from decode_mem.simulate.config import PupilConfig
    from decode_mem.simulate.pupil import pupil_volume
    from decode_mem.simulate.spline_fit import gauss_widths

    inside = (cal.z >= z_range[0]) & (cal.z <= z_range[1])
    half = cal.volume.shape[1] // 2
    true = pupil_volume(PupilConfig(**pupil), cal.z[inside], 100.0, half)[:, ::2, ::2]  # 1 px nodes
    tx, ty = gauss_widths(true)
    gx, gy = gauss_widths(cal.volume[inside])
    return float(max(np.abs(gx / tx - 1).max(), np.abs(gy / ty - 1).max()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=200)
    p.add_argument("--budget_minutes", "--budget", dest="budget", type=float, default=30.0,
                   help="fit --budget_minutes per PSF (--budget: the old spelling)")
    p.add_argument("--psfs", nargs="+", default=list(PSFS))
    p.add_argument("--picasso-python", help="interpreter with picassosr (see picasso_runner.py)")
    p.add_argument("--quick", action="store_true", help="20 frames, 0.3 min budget: checks the script, no result")
    p.add_argument("--out", default=str(RESULTS / "3d.md"))
    p.add_argument("--work", help="keep the stacks, PSFs and fits here (default: a temporary folder)")
    args = p.parse_args(argv)
    if args.quick:
        args.frames, args.budget = 20, 0.3

    import torch
    from command_line import command_line
    from machine import commit, load_average, machine_line
    from picasso_runner import camera_settings, find_picasso_python, picasso_version

    from decode_mem.evaluate import evaluate
    from decode_mem.fit import FitConfig, fit_movies
    from decode_mem.io.localizations import read_localizations
    from decode_mem.io.psf_file import write_psf
    from decode_mem.io.table import EmitterTable
    from decode_mem.psf.beads import BeadSettings, calibrate_beads
    from decode_mem.simulate.stack import simulate_stack

    torch.set_num_threads(1)
    python = find_picasso_python(args.picasso_python)
    load_start, at, t_all = load_average(), commit(), time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_3d_") as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for k, name in enumerate(args.psfs):
            pupil, z_range, picasso_applies = PSFS[name]
            case = work / f"psf{k}"
            case.mkdir(exist_ok=True)
            _planes, step = bead_stack(pupil, case / "beads.tif", seed=100 + k)
            cfg0 = movie_config(pupil, z_range, DENSITIES[1])
            camera = cfg0.camera
            t0 = time.perf_counter()
            cal = calibrate_beads([str(case / "beads.tif")], camera, BeadSettings(z_step=step, roi=25))
            write_psf(case / "psf.h5", cal.spline)
            psf_seconds = time.perf_counter() - t0
            movies, gts = [], []
            for j, density in enumerate(MOVIE_DENSITIES):  # the first is calibrated
                res = simulate_stack(movie_config(pupil, z_range, density), args.frames, case / f"movie_{j}.tif",
                                     case / f"gt_{j}.csv", seed=1000 * k + j)
                movies.append(str(res.out))
                gts.append(read_localizations(res.gt, pixel_size=camera.pixel_size))
            t0 = time.perf_counter()
            report = fit_movies(FitConfig(movies=tuple(movies), out=str(case / "fit"), camera=camera,
                                          psf=str(case / "psf.h5"), budget_minutes=args.budget, threads=1,
                                          val_windows=64 if args.quick else 256, seed=k))
            fit_seconds = time.perf_counter() - t0
            row = {"psf": name, "width_error": width_error(pupil, cal, z_range), "psf_seconds": psf_seconds,
                   "z_range": list(z_range),
                   "valid_z": list(cal.spline.z_range), "fit_minutes": fit_seconds / 60,
                   "train_steps": report.train_steps, "budget": report.as_dict()["budget"], "results": [],
                   "failures": [f.line() for f in report.inference.failures] if report.inference else []}
            picasso = None
            if picasso_applies and python:
                picasso = picasso_3d(python, case, camera_settings(camera), camera.pixel_size, step, pupil, z_range,
                                     args.frames, k, evaluate)
                row["picasso_info"] = picasso["info"]
            for j, density in enumerate(MOVIE_DENSITIES):
                csv = case / "fit" / f"movie_{j}.csv"
                pred = (read_localizations(csv, pixel_size=camera.pixel_size) if csv.exists()
                        else EmitterTable.empty())  # a failed movie counts as no localizations (row['failures'])
                m = evaluate(pred, gts[j], pixel_size=camera.pixel_size).as_dict()
                entry = {"density": density, "n_gt": len(gts[j]), "decode_mem": m}
                if picasso is not None:
                    entry["picasso"] = picasso["test"](movies[j], gts[j])
                row["results"].append(entry)
            row["results"].sort(key=lambda e: e["density"])
            rows.append(row)
            print(f"{name}: done ({(time.perf_counter() - t_all) / 60:.1f} min so far)", flush=True)
    machine = machine_line(1, load_start=load_start, at=at)
    write_report(Path(args.out), rows, args, machine, time.perf_counter() - t_all, command_line(),
                 picasso_version(python) if python else "Picasso not found: its rows are missing")
    return 0


def picasso_3d(python: str, case: Path, camera: dict, px: float, step: float, pupil: dict, z_range, frames: int,
               k: int, evaluate) -> dict:
    """Picasso's astigmatic 3-D: z calibration on the beads, box / threshold / z offset tuned on its own movie."""
    from decode_mem.evaluate.metrics import match_emitters
    from decode_mem.io.localizations import read_localizations
    from decode_mem.simulate.stack import simulate_stack

    tune = simulate_stack(movie_config(pupil, z_range, DENSITIES[1]), frames, case / "tune.tif", case / "tune.csv",
                          seed=1000 * k + 99)
    tune_gt = read_localizations(tune.gt, pixel_size=px)
    calib = case / "picasso_calib.json"
    _worker_call(python, ["calibrate", str(case / "beads.tif"), str(calib), json.dumps(camera), str(step)])
    res = _picasso_locs(python, case / "tune.tif", calib, camera, px, list(BOXES), NG_FLOOR, case)
    best = (BOXES[0], NG_FLOOR, 0.0, -1.0)
    for box in BOXES:
        ng_all = res[f"{box}_net_gradient"]
        hi = max(float(np.percentile(ng_all, 99.5)), NG_FLOOR * 2) if len(ng_all) else NG_FLOOR * 2
        m = match_emitters(_table(res, box, NG_FLOOR, 0.0), tune_gt, pixel_size=px, tolerance_ax=1e9)
        offset = float(np.median(m.dz)) if m.tp else 0.0  # Picasso's z = 0 is where σx = σy
        for ng in np.geomspace(NG_FLOOR, hi, 40):
            jac = evaluate(_table(res, box, ng, offset), tune_gt, pixel_size=px).jaccard
            if jac > best[3]:
                best = (box, float(ng), offset, float(jac))
    box, ng, offset, jac = best

    def test(movie: str, gt) -> dict:
        out = _picasso_locs(python, Path(movie), calib, camera, px, [box], ng, case)
        m = evaluate(_table(out, box, ng, offset), gt, pixel_size=px).as_dict()
        return {**m, "seconds": float(out[f"{box}_seconds"])}

    return {"info": {"box": box, "ng": ng, "z_offset_nm": offset, "jaccard_tune": jac}, "test": test}


def _table(res: dict, box: int, ng: float, offset: float):
    from decode_mem.io.table import EmitterTable

    keep = res[f"{box}_net_gradient"] > ng
    return EmitterTable.from_arrays(frame=res[f"{box}_frame"][keep].astype(np.int64), x=res[f"{box}_x"][keep],
                                    y=res[f"{box}_y"][keep], z=res[f"{box}_z"][keep] - offset,
                                    photons=res[f"{box}_photons"][keep])


def _picasso_locs(python: str, stack: Path, calib: Path, camera: dict, px: float, boxes: list[int], ng: float,
                  work: Path) -> dict:
    out = work / f"{stack.stem}_p3d.npz"
    _worker_call(python, ["localize", str(stack), str(out), str(calib), json.dumps(camera), json.dumps(boxes),
                          str(ng), str(px)])
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def _worker_call(python: str, args: list[str]) -> None:
    import subprocess

    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    done = subprocess.run([python, __file__, "picasso-worker", *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"Picasso 3-D worker failed ({args[0]}):\n{done.stderr[-4000:]}")


def _worker(argv: list[str]) -> None:
    """In Picasso's interpreter. ``calibrate BEADS OUT CAMERA STEP``: Gaussian fits of the bead stack (reversed:
    Picasso's frame 0 is the top, z = +span/2) -> ``zfit.calibrate_z`` -> JSON. ``localize STACK OUT CALIB CAMERA
    BOXES NG PIXEL``: identify + LQ fit + ``zfit`` per box; the localizations and seconds -> npz."""
    import pandas as pd
    import tifffile
    from picasso import localize, zfit

    def fit(movie: np.ndarray, box: int, ng: float, camera: dict) -> pd.DataFrame:
        ids = localize.identify(movie, ng, box, threaded=False, return_info=False)
        spots = localize.get_spots(movie, ids, box, camera)
        locs = localize.locs_from_fits_gauss(ids, localize.fit_spots_gauss(spots), box, em=camera["Gain"] > 1)
        return pd.DataFrame(locs)

    if argv[0] == "calibrate":
        beads, out, camera, step = argv[1], argv[2], json.loads(argv[3]), float(argv[4])
        movie = tifffile.imread(beads)[::-1].copy()
        locs = fit(movie, 9, 1000.0, camera)
        info = [{"Frames": len(movie), "Height": movie.shape[1], "Width": movie.shape[2]}]
        calibration = zfit.calibrate_z(locs, info, step, 1.0)
        Path(out).write_text(json.dumps({k: np.asarray(v).tolist() if hasattr(v, "__len__") else v
                                         for k, v in calibration.items()}))
        return
    stack, out, calib, camera = argv[1], argv[2], json.loads(Path(argv[3]).read_text()), json.loads(argv[4])
    boxes, ng, px = json.loads(argv[5]), float(argv[6]), float(argv[7])
    movie = tifffile.imread(stack)
    info = [{"Frames": len(movie), "Height": movie.shape[1], "Width": movie.shape[2], "Pixelsize": px}]
    fit(movie[:4], boxes[0], ng, camera)  # numba compiles on first use: keep it out of the timing
    result = {}
    for box in boxes:
        t0 = time.perf_counter()
        locs = zfit._fit_z(fit(movie, box, ng, camera), info, calib, 1.0, px)
        result[f"{box}_seconds"] = np.array(time.perf_counter() - t0)
        for col in ("frame", "x", "y", "z", "photons", "net_gradient"):
            result[f"{box}_{col}"] = np.asarray(locs[col])
    np.savez(out, **result)


def _split(budget: dict) -> str:
    """How ``fit`` split its budget (``fit.json``'s ``budget``), as a clause for the goals line."""
    if "train_s" not in budget:
        return ""
    return (f"before training {budget['spent_before_training_s']:.0f} s, training {budget['train_s'] / 60:.1f} min, "
            f"after it {budget['after_training_s']:.0f} s (predicted "
            f"{budget['predicted_localize_s'] + budget['predicted_evaluate_s']:.0f} s); ")


def write_report(out: Path, rows: list[dict], args, machine: str, total: float, command: str, picasso: str) -> None:
    from report_files import write_report_files

    def f(v, d: int = 3) -> str:
        return "–" if v is None or not np.isfinite(v) else f"{v:.{d}f}"

    lines = ["# 3-D with the user's own PSF: decode_mem (psf -> fit --psf) vs Picasso's astigmatic 3-D", "",
             f"Command: `{command}`; {total / 60:.1f} min in all." + (" **--quick: a check that the script runs, "
                                                                     "not a result.**" if args.quick else ""),
             f"Machine: {machine}. {picasso}.", "", __doc__.split("\n\n", 2)[2].strip(), "",
             "| PSF | density (/µm²) | GT | method | Jaccard | RMSE lat (nm) | RMSE ax (nm) | eff. lat (%) "
             "| eff. ax (%) | eff. 3D (%) |", "|---|---|---|---|---|---|---|---|---|---|"]
    goals = []
    for r in rows:
        for e in r["results"]:
            for method in ("decode_mem", "picasso"):
                if method not in e:
                    continue
                m = e[method]
                lines.append(f"| {r['psf']} | {e['density']:g} | {e['n_gt']} | {method} | {f(m['jaccard'])} "
                             f"| {f(m['rmse_lat'], 1)} | {f(m['rmse_ax'], 1)} | {f(m['efficiency_lat'], 1)} "
                             f"| {f(m['efficiency_ax'], 1)} | {f(m['efficiency_vol'], 1)} |")
        if r.get("failures"):
            goals.append(f"- {r['psf']}: decode_mem inference failed on: {'; '.join(r['failures'])}")
        low = r["results"][0]["decode_mem"]
        goals.append(f"- {r['psf']}: PSF from 10 beads within {100 * r['width_error']:.1f} % of the true width "
                     f"over the movies' {r['z_range'][0]:g} to {r['z_range'][1]:g} nm (goal 5 %; the spline is valid "
                     f"over {r['valid_z'][0]:g} to {r['valid_z'][1]:g} nm); fit {r['fit_minutes']:.1f} min "
                     f"(goal {args.budget:g}; {_split(r.get('budget', {}))}{r['train_steps']} steps); axial / lateral "
                     "RMSE at the lowest density "
                     f"{f(low['rmse_ax'] / low['rmse_lat'], 2)} (goal ≤ 2)")
        if "picasso_info" in r:
            gaps = [e["decode_mem"]["jaccard"] - e["picasso"]["jaccard"] for e in r["results"]]
            lower = all(e["decode_mem"]["rmse_lat"] < e["picasso"]["rmse_lat"]
                        and e["decode_mem"]["rmse_ax"] < e["picasso"]["rmse_ax"] for e in r["results"])
            i = r["picasso_info"]
            goals.append(f"  - vs Picasso (box {i['box']}, min ng {i['ng']:.0f}, z offset {i['z_offset_nm']:.0f} nm): "
                         f"Jaccard ahead by {', '.join(f'{g:+.3f}' for g in gaps)} (goal ≥ 0.10 each); lower lateral "
                         f"and axial RMSE at every density: {'yes' if lower else 'no'}")
    lines += ["", "## Goals (computed from the table)", "", *goals,
              "- GPU: **not measured** (CPU run, 1 torch thread)."]
    png = write_report_files(out, lines, lambda path: _plot(rows, path),
                             {"command": command, "rows": rows, "machine": machine})
    print(f"wrote {out}, {out.with_suffix('.json').name} and {png}")


def _plot(rows: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    from decode_mem.io.atomic import atomic_output

    fig = Figure(figsize=(4.5 * max(1, len(rows)), 3.6))
    axes = np.atleast_1d(fig.subplots(1, max(1, len(rows))))
    for ax, r in zip(axes, rows, strict=False):
        d = [e["density"] for e in r["results"]]
        ax.plot(d, [e["decode_mem"]["jaccard"] for e in r["results"]], "o-", label="decode_mem")
        if all("picasso" in e for e in r["results"]):
            ax.plot(d, [e["picasso"]["jaccard"] for e in r["results"]], "s--", label="Picasso 3D")
        ax.set(title=r["psf"], xlabel="density [/µm²]", ylabel="Jaccard (250 / 500 nm)", ylim=(0, 1))
        ax.legend()
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "picasso-worker":
        _worker(sys.argv[2:])
    else:
        sys.path.insert(0, str(HERE))
        sys.exit(main())
