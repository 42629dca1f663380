"""A PSF that changes across a large field: decode_mem's field-dependent PSF and model against one PSF and Picasso.

    python benchmarks/bench_field_psf.py --work runs/field_psf      # hours on a CPU; resumable (each stage once)
    python benchmarks/bench_field_psf.py --quick --out /tmp/fp.md    # minutes: checks that the script runs

A 1024² sCMOS field (100 nm pixels) is simulated through a scalar pupil PSF (astigmatism 0.1 waves, spherical
0.03, ``simulate.field_pupil``) whose aberrations change smoothly across the field, in two patterns: **A**, the
focal plane curving by 200 nm and astigmatism growing by 0.06 waves towards the corners (what the method was
developed on); **B**, a focal plane tilted by 160 nm along x and −120 nm along y and coma growing to 0.08 waves
towards the corners (not used in developing it). A third bead slide without any change checks that ``psf`` then
keeps one PSF. Per pattern: a bead slide (7x7 beads on a jittered grid over the field, z-stack ±1200 nm in 30 nm
steps) and a movie (0.5 emitters/µm², 5000 ± 1500 photons, 50 photons/px background).

decode_mem: ``python -m decode_mem.psf --roi 25`` on the whole slide (the field-dependent PSF; ``--field auto``
decides) and ``fit --psf`` on the movie: a 3-D model that reads each pixel's place in the field, trained for a
fixed number of steps on matched simulations rendered with the PSF of each window's place, localizes the movie. The
single-PSF model: ``psf --field no`` on the slide's central ninth (a region of the slide cut out, 16 px wider on
each side for its beads' regions, as if the beads had been recorded there; its z-stack cut to the z range the field
PSF holds everywhere, so both models train over the same z) and ``fit --psf`` with the same steps, on pattern A's
movie; both patterns share the centre's PSF by construction, so that one model also localizes pattern B's movie
(``infer``). Picasso 3-D is calibrated on the same central beads (``zfit.calibrate_z``) and its box, minimum net
gradient and z offset are tuned on the central ninth of a separate movie against its truth (``bench_3d.py``'s
Picasso runner). Metrics (250 nm lateral, 500 nm axial, optimal matching; ``decode_mem.evaluate``) in the central
ninth and the four corner ninths of the field; the maps: axial error (RMSE and mean) in 8x8 squares of the field;
what the physics allows each region: the Cramér–Rao bound of an isolated emitter through the true PSF.
Memory and speed: each model localizes pattern A's movie in a process of its own (torch engine, the same sizes),
peak RssAnon against its plan, frames/s side by side (two runs each, interleaved).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = ROOT / "benchmarks" / "results"
FIELD = 1024
PIXEL = 100.0
CENTRE_PUPIL = {"astigmatism": 0.1, "spherical": 0.03, "coma": 0.0}
PATTERNS = {
    "A": ("focal plane curving and astigmatism growing towards the corners (developed on)",
          {"defocus_nm": 200.0, "astigmatism": 0.06}),
    "B": ("tilted focal plane and coma growing towards the corners (not developed on)",
          {"tilt_nm": [160.0, -120.0], "coma": 0.08}),
    "none": ("no change across the field (control: one PSF expected)", {}),
}
BEAD_Z = (-1200.0, 1200.0, 30.0)
BEAD_GRID = 7
BEAD_PHOTONS = 50000.0
ROI = 25  # px: every bead's region (as bench_3d: the defocused corners' beads reach beyond the automatic choice)
MOVIE = {"density": 0.5, "photons_mean": 5000.0, "photons_std": 1500.0, "bg": 50.0, "on_time": 2.0, "margin": 6.0}
Z_MOVIE = (-400.0, 400.0)
REGIONS = ("centre", "top-left", "top-right", "bottom-left", "bottom-right")
MAP_BINS = 8
GOAL_AXIAL = 1.25  # field-dependent: corners' axial RMSE within this times the centre's
GOAL_SINGLE = 2.0  # ... where the single-PSF model's corners are worse than this times its centre's
GOAL_JACCARD = 0.03
GOAL_MEMORY = 1.15
GOAL_SPEED = 0.9


def sim_config(pattern: str, frame: int, z_range: tuple[float, float], **extra):
    from decode_mem.simulate import SimulationConfig

    return SimulationConfig.from_dict({"frame_size": [frame, frame], "psf": "pupil", "pupil": CENTRE_PUPIL,
                                       "pupil_field": PATTERNS[pattern][1], "z_range": list(z_range),
                                       "camera": "scmos", **extra})


def bead_positions(frame: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    edge = max(0.04 * frame, 16.0)  # a 25 px bead region stays inside the frame
    g = np.linspace(edge, frame - 1 - edge, BEAD_GRID)
    gx, gy = np.meshgrid(g, g)
    n = gx.size
    return gx.ravel() + rng.uniform(-3, 3, n), gy.ravel() + rng.uniform(-3, 3, n)


def simulate(case: Path, pattern: str, frame: int, frames: int, seed: int) -> None:
    """The bead slide (beads.tif) and the movie (movie.tif + gt.csv) of a pattern; skipped when there."""
    import tifffile

    from decode_mem.simulate.beads import simulate_bead_stack
    from decode_mem.simulate.field_pupil import _node_spline
    from decode_mem.simulate.stack import simulate_stack

    if not (case / "beads.tif").exists():
        x, y = bead_positions(frame, seed)
        z = np.arange(BEAD_Z[0], BEAD_Z[1] + 1e-6, BEAD_Z[2])
        stack = simulate_bead_stack(sim_config(pattern, frame, (BEAD_Z[0], BEAD_Z[1]), density=0.0), x, y, z,
                                    photons=BEAD_PHOTONS, bg=MOVIE["bg"], seed=seed)
        tifffile.imwrite(case / "beads.partial.tif", stack)
        os.replace(case / "beads.partial.tif", case / "beads.tif")
        _node_spline.cache_clear()
    if pattern == "none":
        return
    for name, n, s in (("movie", frames, seed + 1), ("tune", max(2, frames // 2), seed + 2)):
        if not (case / f"{name}.tif").exists():
            simulate_stack(sim_config(pattern, frame, Z_MOVIE, **MOVIE), n, case / f"{name}.tif",
                           case / f"{name}_gt.csv", seed=s)
            _node_spline.cache_clear()


def centre_stack(case: Path, frame: int, z_range: tuple[float, float]) -> Path:
    """The slide's central ninth (grown by 16 px: its beads' regions), its planes cut to ``z_range`` (+ the planes
    the bead fit leaves at each end)."""
    import tifffile

    out = case / "beads_centre.tif"
    if not out.exists():
        stack = tifffile.imread(case / "beads.tif")
        z = np.arange(BEAD_Z[0], BEAD_Z[1] + 1e-6, BEAD_Z[2])
        pad = 4 * BEAD_Z[2]
        keep = (z >= z_range[0] - pad) & (z <= z_range[1] + pad)
        lo, hi = frame // 3 - 16, 2 * frame // 3 + 16  # the central ninth and its beads' regions
        tifffile.imwrite(case / "beads_centre.partial.tif", stack[keep][:, lo:hi, lo:hi])
        os.replace(case / "beads_centre.partial.tif", out)
        (case / "beads_centre.json").write_text(json.dumps({"z_start": float(z[keep][0])}))
    return out


def run_psf(args: list[str], log: Path) -> str:
    """``python -m decode_mem.psf ARGS`` as a user runs it; its output (stdout + stderr) is kept in ``log``."""
    if log.exists():
        return log.read_text()
    done = subprocess.run([sys.executable, "-m", "decode_mem.psf", *args], capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    if done.returncode != 0:
        raise SystemExit(f"psf failed: {' '.join(args)}\n{done.stderr[-3000:]}")
    log.write_text(done.stdout + done.stderr)
    return log.read_text()


def fit_case(movie: Path, psf: Path, out: Path, steps: int, seed: int, camera, threads: int = 1) -> dict:
    """``fit --psf`` (the library call) with a fixed number of training steps; fit.json is the record."""
    from decode_mem.fit import FitConfig, fit_movies

    if (out / "fit.json").exists():
        return json.loads((out / "fit.json").read_text())
    t0 = time.perf_counter()
    fit_movies(FitConfig(movies=(str(movie),), out=str(out), camera=camera, psf=str(psf), budget_minutes=600.0,
                         threads=threads, train_steps=steps, val_windows=64, seed=seed, device="cpu"))
    record = json.loads((out / "fit.json").read_text())
    record["bench_seconds"] = time.perf_counter() - t0
    (out / "fit.json").write_text(json.dumps(record, indent=2))
    return record


def infer_with(model: Path, movie: Path, out: Path, camera) -> Path:
    from decode_mem.infer import InferConfig, run_inference

    csv = out / f"{movie.stem}.csv"
    if not csv.exists():
        run_inference(InferConfig(inputs=(str(movie),), out=str(out), model=str(model), camera=camera,
                                  device="cpu", threads=1))
    return csv


def region_masks(x: np.ndarray, y: np.ndarray, frame: int) -> dict[str, np.ndarray]:
    """Which points (px) lie in the central ninth and in each corner ninth of the field."""
    third = frame / 3
    col, row = np.floor((x + 0.5) / third), np.floor((y + 0.5) / third)
    return {"centre": (col == 1) & (row == 1), "top-left": (col == 0) & (row == 0),
            "top-right": (col == 2) & (row == 0),
            "bottom-left": (col == 0) & (row == 2), "bottom-right": (col == 2) & (row == 2)}


def by_region(pred, gt, frame: int) -> dict[str, dict]:
    """Metrics in each region and in the four corners pooled (``corners``)."""
    from decode_mem.evaluate import evaluate

    pm, gm = region_masks(pred["x"], pred["y"], frame), region_masks(gt["x"], gt["y"], frame)
    out = {r: evaluate(pred.select(pm[r]), gt.select(gm[r]), pixel_size=PIXEL).as_dict() for r in REGIONS}
    corners = [r for r in REGIONS if r != "centre"]
    pc, gc = np.logical_or.reduce([pm[r] for r in corners]), np.logical_or.reduce([gm[r] for r in corners])
    out["corners"] = evaluate(pred.select(pc), gt.select(gc), pixel_size=PIXEL).as_dict()
    split = split_pairs(pred, gt, out["centre"]["tolerance_lat"])  # the matching's own tolerance
    for r in REGIONS:
        out[r]["split_pairs"] = int(split[pm[r]].sum())
    out["corners"]["split_pairs"] = int(split[pc].sum())
    return out


def split_pairs(pred, gt, tolerance_nm: float) -> np.ndarray:
    """Per localization: whether it is the first of a pair in its frame closer than ``tolerance_nm`` (the
    matching's lateral tolerance) that has at most one true emitter within it of either (one emitter read as two:
    the second is a false positive the matching cannot pair)."""
    from scipy.spatial import cKDTree

    radius = tolerance_nm / PIXEL
    first = np.zeros(len(pred), bool)
    for f in np.unique(pred["frame"]):
        mine = np.flatnonzero(pred["frame"] == f)
        pts = np.c_[pred["x"][mine], pred["y"][mine]]
        g = gt["frame"] == f
        truth = cKDTree(np.c_[gt["x"][g], gt["y"][g]]) if g.any() else None
        for a, b in cKDTree(pts).query_pairs(radius, output_type="ndarray"):
            near = set() if truth is None else {*truth.query_ball_point(pts[a], radius),
                                                *truth.query_ball_point(pts[b], radius)}
            if len(near) <= 1:
                first[mine[a]] = True
    return first


def error_maps(pred, gt, frame: int) -> dict[str, list]:
    """Axial RMSE and mean axial error (nm) of the matched pairs in MAP_BINS² squares of the field (by truth)."""
    from decode_mem.evaluate.metrics import match_emitters

    m = match_emitters(pred, gt, pixel_size=PIXEL)
    gx, gy = gt["x"][m.gt_index], gt["y"][m.gt_index]
    col = np.clip(((gx + 0.5) / frame * MAP_BINS).astype(int), 0, MAP_BINS - 1)
    row = np.clip(((gy + 0.5) / frame * MAP_BINS).astype(int), 0, MAP_BINS - 1)
    rmse = np.full((MAP_BINS, MAP_BINS), np.nan)
    mean = np.full((MAP_BINS, MAP_BINS), np.nan)
    for i in range(MAP_BINS):
        for j in range(MAP_BINS):
            sel = (row == i) & (col == j)
            if sel.sum() >= 10:
                rmse[i, j] = float(np.sqrt(np.mean(m.dz[sel] ** 2)))
                mean[i, j] = float(np.mean(m.dz[sel]))
    return {"rmse_ax": rmse.tolist(), "bias_ax": mean.tolist()}


def crlb_by_region(pattern: str, frame: int, camera) -> dict[str, dict[str, float]]:
    """The Cramér–Rao bound of an isolated emitter through the simulation's true PSF, at the centre of the central
    ninth and of each corner ninth: sqrt(CRLB) of x and z (nm), their RMS over the movie's z range (50 nm steps),
    at the movie's mean photons and background with the camera's read noise (x, y, z, photons, background
    estimated; Poisson plus read noise). What the physics allows each region: the corners' PSF holds less
    information on z than the centre's."""
    import torch

    cfg = sim_config(pattern, frame, Z_MOVIE, **MOVIE)
    psf = cfg.field_psf()
    photons, bg, read = MOVIE["photons_mean"], MOVIE["bg"], camera.read_variance_photons
    side, mid = 25, 12.0

    def one(v: float) -> torch.Tensor:
        return torch.tensor([float(v)])

    def mean(dx: float, dy: float, z: float, fx: float, fy: float) -> np.ndarray:
        canvas = torch.zeros((1, side, side))
        psf.render_spots(canvas, torch.tensor([0]), one(mid + dx), one(mid + dy), one(z), one(photons),
                         fx=one(fx).double(), fy=one(fy).double())
        return canvas[0].double().numpy() + bg

    def bound(z: float, fx: float, fy: float) -> tuple[float, float]:
        m = mean(0, 0, z, fx, fy)
        h, hz = 0.02, 2.0
        grads = [(mean(h, 0, z, fx, fy) - mean(-h, 0, z, fx, fy)) / (2 * h),
                 (mean(0, h, z, fx, fy) - mean(0, -h, z, fx, fy)) / (2 * h),
                 (mean(0, 0, z + hz, fx, fy) - mean(0, 0, z - hz, fx, fy)) / (2 * hz),
                 (m - bg) / photons, np.ones_like(m)]
        fisher = np.array([[np.sum(a * c / (m + read)) for c in grads] for a in grads])
        cov = np.linalg.inv(fisher)
        return float(np.sqrt(cov[0, 0]) * PIXEL), float(np.sqrt(cov[2, 2]))

    third = frame / 3
    places = {"centre": (1.5, 1.5), "top-left": (0.5, 0.5), "top-right": (2.5, 0.5), "bottom-left": (0.5, 2.5),
              "bottom-right": (2.5, 2.5)}
    out = {}
    for region, (cx, cy) in places.items():
        values = np.array([bound(z, cx * third - 0.5, cy * third - 0.5)
                           for z in np.arange(Z_MOVIE[0], Z_MOVIE[1] + 1e-6, 50.0)])
        rms = np.sqrt(np.mean(values ** 2, axis=0))
        out[region] = {"x_nm": float(rms[0]), "z_nm": float(rms[1])}
    return out


def picasso(python: str, case: Path, centre: Path, camera, frame: int, step: float) -> dict | None:
    """Picasso 3-D calibrated on the central beads, tuned on the central ninth of the tune movie; a function
    localizing a movie with the tuned settings."""
    sys.path.insert(0, str(HERE))
    from bench_3d import BOXES, NG_FLOOR, _picasso_locs, _table, _worker_call
    from picasso_runner import camera_settings

    from decode_mem.evaluate import evaluate
    from decode_mem.evaluate.metrics import match_emitters
    from decode_mem.io.localizations import read_localizations

    cam = camera_settings(camera)
    calib = case / "picasso_calib.json"
    if not calib.exists():
        _worker_call(python, ["calibrate", str(centre), str(calib), json.dumps(cam), str(step)])
    tuned = case / "picasso_tuned.json"
    if not tuned.exists():
        gt = read_localizations(case / "tune_gt.csv", pixel_size=PIXEL)
        gt = gt.select(region_masks(gt["x"], gt["y"], frame)["centre"])
        res = _picasso_locs(python, case / "tune.tif", calib, cam, PIXEL, list(BOXES), NG_FLOOR, case)
        best = (BOXES[0], NG_FLOOR, 0.0, -1.0)
        for box in BOXES:
            ng_all = res[f"{box}_net_gradient"]
            hi = max(float(np.percentile(ng_all, 99.5)), NG_FLOOR * 2) if len(ng_all) else NG_FLOOR * 2

            def central(table):
                return table.select(region_masks(table["x"], table["y"], frame)["centre"])

            m = match_emitters(central(_table(res, box, NG_FLOOR, 0.0)), gt, pixel_size=PIXEL, tolerance_ax=1e9)
            offset = float(np.median(m.dz)) if m.tp else 0.0  # Picasso's z = 0 is where σx = σy
            for ng in np.geomspace(NG_FLOOR, hi, 30):
                jac = evaluate(central(_table(res, box, ng, offset)), gt, pixel_size=PIXEL).jaccard
                if jac > best[3]:
                    best = (box, float(ng), offset, float(jac))
        tuned.write_text(json.dumps(dict(zip(("box", "ng", "z_offset_nm", "jaccard_tune"), best, strict=True))))
    info = json.loads(tuned.read_text())

    def localize(movie: Path):
        res = _picasso_locs(python, movie, calib, cam, PIXEL, [info["box"]], info["ng"], movie.parent)
        return _table(res, info["box"], info["ng"], info["z_offset_nm"]), float(res[f"{info['box']}_seconds"])

    return {"info": info, "localize": localize}


def speed_child(spec: dict) -> dict:
    """In a fresh process: one model localizes a movie (torch engine, the given sizes); seconds, peak RssAnon and
    the plan's host bytes."""
    import torch

    from decode_mem.infer import predict_stack
    from decode_mem.io import open_stack
    from decode_mem.io.camera import Camera
    from decode_mem.memory import measure_phase
    from decode_mem.model.checkpoint import load_model

    torch.set_num_threads(1)
    model = load_model(spec["model"], device="cpu")
    plans = []
    n = 0
    with open_stack(spec["movie"]) as stack:
        t0 = time.perf_counter()
        with measure_phase("infer", interval=0.002, device="cpu") as phase:
            for table in predict_stack(stack, model, camera=Camera.scmos(), device="cpu", engine="torch",
                                       chunk_size=spec["chunk"], batch_size=spec["batch"], on_plan=plans.append):
                n += len(table)
        seconds = time.perf_counter() - t0
        frames = stack.shape[0]
    return {"seconds": seconds, "frames": frames, "localizations": n, "peak_anon_mib": phase.rss_anon_peak_mb,
            "plan_host_mib": plans[0].plan.host_bytes / 2**20}


def speed(models: dict[str, Path], movie: Path, work: Path, repeats: int) -> dict:
    out: dict[str, list] = {k: [] for k in models}
    for r in range(repeats):
        for name, model in (models.items() if r % 2 == 0 else reversed(list(models.items()))):
            spec = {"model": str(model), "movie": str(movie), "chunk": 256, "batch": 4}
            result = work / "speed_result.json"
            done = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec), str(result)],
                                  capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
            if done.returncode != 0:
                raise SystemExit(f"speed child failed:\n{done.stderr[-3000:]}")
            out[name].append(json.loads(result.read_text()))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True, help="folder for the stacks, PSFs, models (kept: a rerun continues)")
    p.add_argument("--steps", type=int, default=3000, help="training steps of each model (default 3000)")
    p.add_argument("--frames", type=int, default=12, help="frames of each movie")
    p.add_argument("--train-threads", type=int, default=1,
                   help="torch threads of each model's training (default 1; a rerun may change it between models: "
                        "the steps are the same, their seconds are not)")
    p.add_argument("--picasso-python", help="interpreter with picassosr (see picasso_runner.py)")
    p.add_argument("--quick", action="store_true", help="a 256² field, 20 steps: checks the script, no result")
    p.add_argument("--out", default=str(RESULTS / "field_psf.md"))
    args = p.parse_args(argv)
    frame = 256 if args.quick else FIELD
    if args.quick:
        args.steps, args.frames = 20, 4

    import torch
    from command_line import command_line
    from machine import commit, load_average, machine_line
    from picasso_runner import find_picasso_python, picasso_version

    from decode_mem.io.camera import Camera
    from decode_mem.io.field_psf_file import field_header
    from decode_mem.io.localizations import read_localizations
    from decode_mem.io.table import EmitterTable

    torch.set_num_threads(1)
    camera = Camera.scmos()
    python = find_picasso_python(args.picasso_python)
    load_start, at, t_all = load_average(), commit(), time.perf_counter()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    step = BEAD_Z[2]
    z_start = BEAD_Z[0]
    result: dict = {"patterns": {}, "frame": frame, "steps": args.steps, "frames": args.frames}
    for k, pattern in enumerate(PATTERNS):
        case = work / pattern
        case.mkdir(exist_ok=True)
        simulate(case, pattern, frame, args.frames, seed=100 * (k + 1))
        log = run_psf([str(case / "beads.tif"), "--z_step", str(step), "--z_start", str(z_start), "--roi", str(ROI),
                       "--out", str(case / "psf_field.h5"), "--camera", "scmos"], case / "psf_field.log")
        head = field_header(case / "psf_field.h5")
        result["patterns"][pattern] = {"psf_log": log, "field_psf": head is not None,
                                       "field_info": head["info"] if head else None,
                                       "z_range": list(head["z_range"]) if head else None}
        print(f"pattern {pattern}: beads and movies simulated, psf done ({(time.perf_counter() - t_all) / 60:.1f} "
              "min so far)", flush=True)
    if not result["patterns"]["A"]["field_psf"] or not result["patterns"]["B"]["field_psf"]:
        raise SystemExit("psf kept one PSF for a pattern that changes across the field: see psf_field.log")
    # the single PSF: the central ninth of pattern A's slide, cut to the z range the field PSF holds everywhere
    case_a = work / "A"
    za = tuple(result["patterns"]["A"]["z_range"])
    centre = centre_stack(case_a, frame, za)
    start = json.loads((case_a / "beads_centre.json").read_text())["z_start"]
    result["single_log"] = run_psf([str(centre), "--z_step", str(step), "--z_start", str(start), "--field", "no",
                                    "--roi", str(ROI), "--out", str(case_a / "psf_centre.h5"), "--camera", "scmos"],
                                   case_a / "psf_centre.log")
    fits = {}
    for name, movie, psf in (("field A", case_a / "movie.tif", case_a / "psf_field.h5"),
                             ("single", case_a / "movie.tif", case_a / "psf_centre.h5"),
                             ("field B", work / "B" / "movie.tif", work / "B" / "psf_field.h5")):
        folder = work / "fits" / name.replace(" ", "_")
        fits[name] = fit_case(movie, psf, folder, args.steps, seed=7, camera=camera, threads=args.train_threads)
        print(f"{name}: trained and localized ({(time.perf_counter() - t_all) / 60:.1f} min so far)", flush=True)
    result["fits"] = {k: {kk: v.get(kk) for kk in ("train_steps", "validation", "train_minutes", "bench_seconds")}
                      for k, v in fits.items()}
    single_model = work / "fits" / "single" / "model.pt"
    csvs = {("A", "field-dependent"): work / "fits" / "field_A" / "movie.csv",
            ("A", "single PSF"): work / "fits" / "single" / "movie.csv",
            ("B", "field-dependent"): work / "fits" / "field_B" / "movie.csv",
            ("B", "single PSF"): infer_with(single_model, work / "B" / "movie.tif", work / "fits" / "single_on_B",
                                            camera)}
    pic = {}
    if python:
        for pattern in ("A", "B"):
            case = work / pattern
            centre_p = centre_stack(case, frame, za)
            pic[pattern] = picasso(python, case, centre_p, camera, frame, step)
    metrics, maps = {}, {}
    for pattern in ("A", "B"):
        gt = read_localizations(work / pattern / "movie_gt.csv", pixel_size=PIXEL)
        tables = {}
        for method in ("field-dependent", "single PSF"):
            csv = csvs[(pattern, method)]
            tables[method] = (read_localizations(csv, pixel_size=PIXEL) if csv.exists() else EmitterTable.empty())
        if pattern in pic:
            tables["Picasso 3-D"], seconds = pic[pattern]["localize"](work / pattern / "movie.tif")
            result.setdefault("picasso", {})[pattern] = {**pic[pattern]["info"], "seconds": seconds}
        for method, table in tables.items():
            metrics[f"{pattern}|{method}"] = by_region(table, gt, frame)
            maps[f"{pattern}|{method}"] = error_maps(table, gt, frame)
        metrics[f"{pattern}|truth"] = {"n_gt": len(gt)}
    result["metrics"], result["maps"] = metrics, maps
    result["crlb"] = {pattern: crlb_by_region(pattern, frame, camera) for pattern in ("A", "B")}
    result["speed"] = speed({"field-dependent": work / "fits" / "field_A" / "model.pt", "single PSF": single_model},
                            case_a / "movie.tif", work, repeats=1 if args.quick else 2)
    threads = f"1 torch thread localizing, {args.train_threads} training"
    machine = machine_line(threads, load_start=load_start, at=at)
    write_report(Path(args.out), result, args, machine, time.perf_counter() - t_all, command_line(),
                 picasso_version(python) if python else "Picasso not found: its rows are missing")
    return 0


def _f(v, d: int = 3) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:.{d}f}"


def goals(result: dict) -> list[str]:
    """The goal lines, each computed from the metrics."""
    m = result["metrics"]
    lines = []
    for pattern in ("A", "B"):
        fd, sp = m[f"{pattern}|field-dependent"], m[f"{pattern}|single PSF"]
        ratio = fd["corners"]["rmse_ax"] / fd["centre"]["rmse_ax"]
        single = sp["corners"]["rmse_ax"] / sp["centre"]["rmse_ax"]
        gap = fd["centre"]["jaccard"] - fd["corners"]["jaccard"]
        bound = result.get("crlb", {}).get(pattern)
        physics = ""
        if bound:
            limit = np.mean([bound[r]["z_nm"] for r in REGIONS[1:]]) / bound["centre"]["z_nm"]
            physics = f" (the Cramér–Rao bound's corners: {limit:.2f}x its centre's)"
        lines.append(f"- pattern {pattern}: field-dependent corners' axial RMSE {_f(ratio, 2)}x the centre's (goal "
                     f"≤ {GOAL_AXIAL}): **{'met' if ratio <= GOAL_AXIAL else 'not met'}**{physics}; the single-PSF "
                     "model's "
                     f"{_f(single, 2)}x (the goal's premise: > {GOAL_SINGLE}x: "
                     f"{'yes' if single > GOAL_SINGLE else 'no'}); Jaccard corners {_f(gap, 3)} below the centre "
                     f"(goal ≤ {GOAL_JACCARD}): **{'met' if gap <= GOAL_JACCARD else 'not met'}**")
    s = result["speed"]
    fd = s["field-dependent"]
    sp = s["single PSF"]
    fps_fd = np.mean([r["frames"] / r["seconds"] for r in fd])
    fps_sp = np.mean([r["frames"] / r["seconds"] for r in sp])
    mem = max(r["peak_anon_mib"] / r["plan_host_mib"] for r in fd)
    lines.append(f"- memory: the field-dependent model's peak RssAnon {max(r['peak_anon_mib'] for r in fd):.0f} MiB, "
                 f"{mem:.2f}x its plan ({fd[0]['plan_host_mib']:.0f} MiB; goal ≤ {GOAL_MEMORY}): "
                 f"**{'met' if mem <= GOAL_MEMORY else 'not met'}**")
    lines.append(f"- speed: {fps_fd:.3f} frames/s against the single-PSF model's {fps_sp:.3f} ({fps_fd / fps_sp:.2f}x; "
                 f"goal ≥ {GOAL_SPEED}x): **{'met' if fps_fd / fps_sp >= GOAL_SPEED else 'not met'}**")
    return lines


def write_report(out: Path, result: dict, args, machine: str, total: float, command: str, picasso: str) -> None:
    from report_files import write_report_files

    lines = ["# A PSF that changes across a large field: field-dependent PSF and model vs one PSF and Picasso 3-D", "",
             f"Command: `{command}`; {total / 60:.1f} min in all (stages done before a rerun are not counted)."
             + (" **--quick: a check that the script runs, not a result.**" if args.quick else ""),
             f"Machine: {machine}. {picasso}.", "", __doc__.split("\n\n", 2)[2].strip(), "",
             f"Field {result['frame']}² px; {result['frames']} frames per movie; {result['steps']} training steps per "
             "model (fit's 3-D model and batch).", "", "## What `psf` found", ""]
    for pattern, p in result["patterns"].items():
        verdict = "a field-dependent PSF" if p["field_psf"] else "one PSF"
        summary = next((ln for ln in p["psf_log"].splitlines() if "PSF" in ln and "leave-one-bead-out" in ln), "")
        lines.append(f"- {pattern} ({PATTERNS[pattern][0]}): {verdict}. `psf` said: {summary}")
    lines += ["", "## Accuracy by region", "",
              "Recall and precision beside the Jaccard; *split*: pairs of localizations closer than 250 nm in a "
              "frame with at most one true emitter within 250 nm of either (one emitter read as two), per 100 true "
              "emitters of the region.", "",
              "| pattern | method | region | GT | Jaccard | recall | precision | split | RMSE lat (nm) | RMSE ax (nm) "
              "| mean z error (nm) |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, regions in result["metrics"].items():
        pattern, method = key.split("|")
        if method == "truth":
            continue
        for region in ("centre", "corners", *REGIONS[1:]):
            r = regions[region]
            split = (100.0 * r["split_pairs"] / r["n_gt"]) if r.get("split_pairs") is not None and r["n_gt"] else None
            lines.append(f"| {pattern} | {method} | {region} | {r['n_gt']} | {_f(r['jaccard'])} | "
                         f"{_f(r.get('recall'))} | {_f(r.get('precision'))} | {_f(split, 1)} | "
                         f"{_f(r['rmse_lat'], 1)} | {_f(r['rmse_ax'], 1)} | {_f(r['bias_z'], 1)} |")
    lines += ["", "## What the physics allows (Cramér–Rao bound through the true PSF)", "",
              f"An isolated emitter of {MOVIE['photons_mean']:g} photons on {MOVIE['bg']:g} photons/px of background "
              "(the movie's means), the camera's read noise; sqrt(CRLB) of x and z, RMS over the movie's z range, at "
              "the centre of each region; *z ÷ centre's*: what the goal's 1.25x for the RMSE compares with.", "",
              "| pattern | region | x (nm) | z (nm) | z ÷ centre's |", "|---|---|---|---|---|"]
    for pattern, regions in result.get("crlb", {}).items():
        centre_z = regions["centre"]["z_nm"]
        for region, v in regions.items():
            lines.append(f"| {pattern} | {region} | {v['x_nm']:.1f} | {v['z_nm']:.1f} | {v['z_nm'] / centre_z:.2f} |")
    lines += ["", "## Goals (computed from the tables)", "", *goals(result), "",
              "## Training", ""]
    for name, f in result["fits"].items():
        lines.append(f"- {name}: {f['train_steps']} steps, {_f(f['train_minutes'], 1)} min of training; held-out "
                     f"matched windows {json.dumps(f['validation'])}")
    if "picasso" in result:
        for pattern, info in result["picasso"].items():
            lines.append(f"- Picasso on {pattern}: box {info['box']}, min net gradient {info['ng']:.0f}, z offset "
                         f"{info['z_offset_nm']:.0f} nm (tuned on the tune movie's central ninth, Jaccard "
                         f"{info['jaccard_tune']:.3f}); {info['seconds']:.1f} s")
    lines += ["", "## Memory and speed (pattern A's movie, torch engine, chunk 256, batch 4, 1 thread)", "",
              "| model | run | frames/s | peak RssAnon (MiB) | plan (MiB) |", "|---|---|---|---|---|"]
    for name, runs in result["speed"].items():
        for i, r in enumerate(runs):
            lines.append(f"| {name} | {i + 1} | {r['frames'] / r['seconds']:.3f} | {r['peak_anon_mib']:.0f} | "
                         f"{r['plan_host_mib']:.0f} |")
    lines += ["", "GPU: **not measured** (CPU run, 1 torch thread).", "",
              "Maps: axial RMSE and mean axial error in 8x8 squares of the field, per pattern and method."]
    png = write_report_files(out, lines, lambda path: _plot(result, path), result)
    print(f"wrote {out} and {png}")


def _plot(result: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    from decode_mem.io.atomic import atomic_output

    keys = [k for k in result["maps"]]
    fig = Figure(figsize=(3.3 * len(keys), 6.4))
    axes = fig.subplots(2, len(keys), squeeze=False)
    rmse_max = max(np.nanmax(np.asarray(result["maps"][k]["rmse_ax"], float)) for k in keys)
    bias_max = max(np.nanmax(np.abs(np.asarray(result["maps"][k]["bias_ax"], float))) for k in keys)
    for j, key in enumerate(keys):
        pattern, method = key.split("|")
        a = axes[0, j].imshow(np.asarray(result["maps"][key]["rmse_ax"], float), cmap="viridis", vmin=0,
                              vmax=rmse_max)
        axes[0, j].set_title(f"{pattern}: {method}\naxial RMSE [nm]", fontsize=9)
        b = axes[1, j].imshow(np.asarray(result["maps"][key]["bias_ax"], float), cmap="coolwarm", vmin=-bias_max,
                              vmax=bias_max)
        axes[1, j].set_title("mean axial error [nm]", fontsize=9)
        for ax in axes[:, j]:
            ax.set_xticks([])
            ax.set_yticks([])
    fig.colorbar(a, ax=axes[0, :].tolist(), shrink=0.8)
    fig.colorbar(b, ax=axes[1, :].tolist(), shrink=0.8)
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png", dpi=80)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.path.insert(0, str(HERE))
        Path(sys.argv[3]).write_text(json.dumps(speed_child(json.loads(sys.argv[2]))))
    else:
        sys.path.insert(0, str(HERE))
        sys.exit(main())
