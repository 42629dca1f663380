"""How well ``calibrate_movie`` recovers the physics a movie was simulated with.

    python benchmarks/bench_calibrate.py                # 36 movies of 64x64 px x 200 frames, ~2 min on 1 core
    python benchmarks/bench_calibrate.py --frames 100   # quicker

Grid: PSF σ 0.8 / 1.0 / 1.5 px x background 20 / 100 / 500 photons/px x EMCCD / sCMOS (the presets of
``decode_mem.io.camera.Camera``) x density 0.5 / 1.0 emitters/µm²; flux lognormal (mean 3000, std 900
photons per full frame on), on-time 2 frames (exponential mean). Truths: σ and background as simulated;
``photons_median`` against the median ground-truth photons of the emitters the calibration found (within
1 px, same frame); ``flux_median`` against the lognormal median; ``density_per_um2`` and the mean track
length (``on_time_frames``) against the ground-truth emitters per frame and on-time + 1 frames (the frames
an emitter touches). Then bright spots on a cell-like background (sCMOS, flux lognormal 8000 ± 2400 photons,
background rising from 80 to 900 photons/px across the frame: glass, cell body, nucleus; PSF σ 1 / 1.5 / 2 px,
density 0.5 / 1 per µm²), where a calibration once read photons 1.6x too high. Then three wrong cameras.
Writes benchmarks/results/calibrate.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from command_line import command_line
from machine import machine_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PHOTONS_MEAN, PHOTONS_STD, ON_TIME = 3000.0, 900.0, 2.0


def matched_photons(locs: dict, gt) -> np.ndarray:
    """Ground-truth photons of the emitters that the photometry localizations found within 1 px, same frame."""
    from scipy.spatial import cKDTree

    out = []
    ok = locs["photometry"].astype(bool)
    for f in np.unique(locs["frame"][ok]):
        mine, theirs = ok & (locs["frame"] == f), gt["frame"] == f
        if theirs.any():
            d, i = cKDTree(np.column_stack([gt["x"][theirs], gt["y"][theirs]])).query(
                np.column_stack([locs["x"][mine], locs["y"][mine]]))
            out.append(gt["photons"][theirs][i[d < 1.0]])
    return np.concatenate(out) if out else np.zeros(0)


def run_case(sigma: float, bg: float, kind: str, density: float, frames: int, seed: int) -> dict:
    from decode_mem.calibrate import calibrate_movie
    from decode_mem.io.camera import preset
    from decode_mem.simulate import SimulationConfig, simulate_movie

    camera = preset(kind)
    cfg = SimulationConfig(frame_size=(64, 64), density=density, photons_dist="lognormal", photons_mean=PHOTONS_MEAN,
                           photons_std=PHOTONS_STD, on_time=ON_TIME, bg=(bg, bg), psf_sigma=(sigma, sigma),
                           camera=camera)
    adu, gt, _ = simulate_movie(cfg, frames, seed=seed)
    t0 = time.perf_counter()
    cal = calibrate_movie(adu, camera, frames=frames)
    seconds = time.perf_counter() - t0
    e = {k: v.value for k, v in cal.estimates.items()}
    flux_median = PHOTONS_MEAN / np.sqrt(1 + (PHOTONS_STD / PHOTONS_MEAN) ** 2)
    true_density = len(gt) / frames / (64 * 64 * (camera.pixel_size / 1000) ** 2)
    return {
        "case": f"{kind} σ{sigma:g} bg{bg:g} d{density:g}",
        "sigma": e["psf_sigma_px"] / sigma - 1,
        "bg": e["background_photons"] / bg - 1,
        "photons": e["photons_median"] / np.median(matched_photons(cal.diagnostics.localizations, gt)) - 1,
        "flux": e["flux_median"] / flux_median - 1,
        "density": e["density_per_um2"] / true_density,
        "on_time": e["on_time_frames"] / (ON_TIME + 1),
        "noise": cal.camera_check.noise_ratio,
        "verdict": cal.camera_check.verdict,
        "seconds": seconds,
    }


def run_cell_case(sigma: float, density: float, frames: int, seed: int) -> dict:
    """Bright spots on ``cell_on_glass`` (the simulator's noise model, our background); truths as in ``run_case``,
    the background's against the field's median."""
    import torch

    from decode_mem.calibrate import calibrate_movie
    from decode_mem.io.camera import Camera
    from decode_mem.io.table import EmitterTable
    from decode_mem.simulate import SimulationConfig
    from decode_mem.simulate.cell_on_glass import cell_on_glass
    from decode_mem.simulate.movie import MovieSimulator

    mean, std = 8000.0, 2400.0
    camera = Camera.scmos()
    cfg = SimulationConfig(frame_size=(64, 64), density=density, photons_dist="lognormal", photons_mean=mean,
                           photons_std=std, on_time=ON_TIME, bg=(100.0, 100.0), psf_sigma=(sigma, sigma),
                           camera=camera)
    sim = MovieSimulator(cfg, seed, "cpu")
    field = cell_on_glass(64, 64)
    sim.bg = torch.from_numpy(field)
    adu = np.empty((frames, 64, 64), np.uint16)
    tables = []
    for blk in sim.blocks(frames, None):
        adu[blk.t0:blk.t0 + len(blk.adu)] = blk.adu_uint16
        tables.append(blk.gt)
    gt = EmitterTable.concat(tables)
    t0 = time.perf_counter()
    cal = calibrate_movie(adu, camera, frames=frames)
    seconds = time.perf_counter() - t0
    e = {k: v.value for k, v in cal.estimates.items()}
    return {
        "case": f"scmos σ{sigma:g} cell 80–900 d{density:g}",
        "sigma": e["psf_sigma_px"] / sigma - 1,
        "bg": e["background_photons"] / float(np.median(field)) - 1,
        "photons": e["photons_median"] / np.median(matched_photons(cal.diagnostics.localizations, gt)) - 1,
        "flux": e["flux_median"] / (mean / np.sqrt(1 + (std / mean) ** 2)) - 1,
        "density": e["density_per_um2"] / (len(gt) / frames / (64 * 64 * (camera.pixel_size / 1000) ** 2)),
        "on_time": e["on_time_frames"] / (ON_TIME + 1),
        "noise": cal.camera_check.noise_ratio,
        "verdict": cal.camera_check.verdict,
        "seconds": seconds,
    }


def wrong_cameras(frames: int) -> list[str]:
    from decode_mem.calibrate import calibrate_movie
    from decode_mem.io.camera import Camera
    from decode_mem.simulate import SimulationConfig, simulate_movie

    rows = []
    for data, given, label in ((Camera.scmos(), Camera.emccd(), "sCMOS movie, EMCCD default camera"),
                               (Camera.emccd(), Camera.emccd(em_gain=100.0), "EMCCD movie, EM gain 100 instead of 300"),
                               (Camera.scmos(), Camera.scmos(baseline=0.0), "sCMOS movie, baseline 0 instead of 100")):
        cfg = SimulationConfig(frame_size=(64, 64), density=0.5, photons_dist="lognormal", photons_mean=PHOTONS_MEAN,
                               photons_std=PHOTONS_STD, bg=(100.0, 100.0), camera=data)
        adu, _, _ = simulate_movie(cfg, frames, seed=7)
        check = calibrate_movie(adu, given, frames=frames).camera_check
        rows.append(f"| {label} | {check.noise_ratio:.3f} | {check.verdict} | {check.implied_baseline_adu:.0f} | "
                    f"{check.implied_e_per_adu:.3g} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frames", type=int, default=200)
    p.add_argument("--out", default=str(RESULTS / "calibrate.md"))
    p.add_argument("--cases", nargs="+", choices=("grid", "cell", "wrong"), default=["grid", "cell", "wrong"],
                   help="which sections to run (a report of some sections says so in its command line)")
    args = p.parse_args(argv)
    args.command = command_line(argv)
    import torch

    torch.set_num_threads(1)
    rows = []
    seed = 0
    for density in (0.5, 1.0) if "grid" in args.cases else ():
        for kind in ("emccd", "scmos"):
            for sigma in (0.8, 1.0, 1.5):
                for bg in (20.0, 100.0, 500.0):
                    seed += 1
                    rows.append(run_case(sigma, bg, kind, density, args.frames, seed))
                    print(rows[-1]["case"], f"{rows[-1]['seconds']:.1f} s", flush=True)
    cells = []
    for density in (0.5, 1.0) if "cell" in args.cases else ():
        for sigma in (1.0, 1.5, 2.0):
            seed += 1
            cells.append(run_cell_case(sigma, density, args.frames, seed))
            print(cells[-1]["case"], f"{cells[-1]['seconds']:.1f} s", flush=True)
    wrong = wrong_cameras(args.frames) if "wrong" in args.cases else []

    def pct(v: float) -> str:
        return f"{100 * v:+.1f} %"

    def row(r: dict) -> str:
        return (f"| {r['case']} | {pct(r['sigma'])} | {pct(r['bg'])} | {pct(r['photons'])} | {pct(r['flux'])} | "
                f"{r['density']:.2f} | {r['on_time']:.2f} | {r['noise']:.3f} | {r['verdict']} | {r['seconds']:.1f} |")

    def worst(rs: list[dict]) -> str:
        if not rs:
            return "not run"
        return ", ".join(f"{k} {100 * max(abs(r[k]) for r in rs):.1f} %" for k in ("sigma", "bg", "photons", "flux"))

    lines = [
        "# calibrate: recovery of simulated physics",
        "",
        f"Command: `{args.command}`",
        "",
        f"Machine: {machine_line(1)} (shared); numpy {np.__version__}.",
        "",
        f"Movies: 64 x 64 px x {args.frames} frames, flux lognormal {PHOTONS_MEAN:g} ± {PHOTONS_STD:g} photons, "
        f"on-time {ON_TIME:g} frames; the right camera given. Columns: relative error of σ, background, photons "
        "median (vs the found emitters' true photons) and flux median (vs the simulated median); detected / true "
        "density and mean track length / (on-time + 1); the camera check's noise ratio and verdict; calibration "
        "time.",
        "",
        "| physics | σ | background | photons median | flux median | density ratio | track length ratio | "
        "noise ratio | camera | s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [row(r) for r in rows]
    lines += ["", "Largest |error| over the grid: " + worst(rows)
              + (f"; density ratio {min(r['density'] for r in rows):.2f}–{max(r['density'] for r in rows):.2f}, "
                 f"track length ratio {min(r['on_time'] for r in rows):.2f}–{max(r['on_time'] for r in rows):.2f}; "
                 f"camera verdicts: {sum(r['verdict'] == 'ok' for r in rows)} of {len(rows)} ok." if rows else "."),
              "", "## Bright spots on a cell-like background", "",
              f"sCMOS preset, 64 x 64 px x {args.frames} frames, flux lognormal 8000 ± 2400 photons, on-time "
              f"{ON_TIME:g} frames; the background rises from 80 photons/px (glass, left) to 900 (a nucleus, right), "
              "median 342; background error against that median. Same columns.", "",
              "| physics | σ | background | photons median | flux median | density ratio | track length ratio | "
              "noise ratio | camera | s |",
              "|---|---|---|---|---|---|---|---|---|---|",
              *[row(r) for r in cells],
              "", "Largest |error| on the cell-like background: " + worst(cells) + ".",
              "", "## Wrong camera settings (background 100 photons/px, density 0.5)", "",
              "| movie and camera | noise ratio | verdict | baseline if the gain were right [ADU] | "
              "e_per_adu if the baseline were right |", "|---|---|---|---|---|", *wrong, ""]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    from decode_mem.io.atomic import atomic_output

    with atomic_output(out) as tmp:
        tmp.write_text("\n".join(lines))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
