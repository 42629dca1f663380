"""The camera check on dense and 3-D movies: is the right camera left alone, and a wrong one still named?

    python benchmarks/bench_camera_noise.py                        # results/camera_noise.md + .png (~2 min)
    python benchmarks/bench_camera_noise.py --quick --out /tmp/cn.md

Movies of 128² px (``decode_mem.simulate``, the default EMCCD, 5000 ± 1500 photons on 50 photons/px, as
``bench_3d``) with a 2-D Gaussian PSF of σ 1 and 2 px and ``bench_3d``'s aberrated astigmatic and double-helix
pupil PSFs, at 0.3 to 3 emitters/µm². Each movie is calibrated as ``infer``'s domain check does (its first 10
frames, ``check_domain``'s quick settings) and as ``calibrate``/``fit`` do (60 frames), with the camera that
recorded it; the densest movies also with three wrong cameras (e-/ADU twice and half the true one, the sCMOS
preset). Per check: the ratio of measured to predicted noise from the quiet pixels' variance over time (the only
estimate before ``calibrate.noise``; outside 2/3..3/2 it warned), the ratio from the estimate the check now
uses, that estimate's method, and the verdict. The real EMCCD movie (``../shared/data/real``) gives the
correlation of neighbouring pixels along rows and columns and the three estimates' ratios with a camera
of gain 1 (the movie's gain is not stated: only their agreement is compared).

Every number comes from the run that wrote the report.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_3d import PSFS
from command_line import command_line
from machine import commit, load_average, machine_line
from report_files import write_report_files

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
REAL = ROOT.parent / "shared" / "data" / "real" / "locan_dstorm_5frames.tif"
CASES = {
    "2-D Gaussian σ 1 px": {"psf": "gauss2d", "psf_sigma": 1.0},
    "2-D Gaussian σ 2 px": {"psf": "gauss2d", "psf_sigma": 2.0},
    "astigmatic + spherical + coma": {"psf": "pupil", "pupil": PSFS["astigmatic + spherical + coma"][0],
                                      "z_range": list(PSFS["astigmatic + spherical + coma"][1])},
    "double helix": {"psf": "pupil", "pupil": PSFS["double helix"][0], "z_range": list(PSFS["double helix"][1])},
}
DENSITIES = (0.3, 1.0, 2.0, 3.0)
SAMPLES = {"domain check (10 frames)": 10, "calibrate (60 frames)": 60}


def movie(case: dict, density: float, frames: int, seed: int):
    from decode_mem.simulate import SimulationConfig, simulate_movie

    cfg = SimulationConfig.from_dict({"frame_size": [128, 128], "density": density, "photons_mean": 5000.0,
                                      "photons_std": 1500.0, "bg": 50.0, "on_time": 2.0, "camera": "emccd",
                                      **case})
    return simulate_movie(cfg, frames, seed=seed)[0], cfg.camera


def check(adu: np.ndarray, camera, frames: int) -> dict:
    from decode_mem.calibrate import calibrate_movie
    from decode_mem.calibrate.camera_check import NOISE_RATIO_OK
    from decode_mem.infer.domain import DOMAIN_PILOT_FRAMES, DOMAIN_SWEEPS

    quick = {"pilot_frames": DOMAIN_PILOT_FRAMES, "sweeps": DOMAIN_SWEEPS} if frames <= 10 else {}
    t0 = time.perf_counter()
    c = calibrate_movie(adu[:frames], camera, frames=frames, **quick).camera_check
    lo, hi = NOISE_RATIO_OK
    return {"quiet": c.quiet_ratio, "quiet_warned": not lo <= c.quiet_ratio <= hi, "ratio": c.noise_ratio,
            "method": c.noise_method, "warned": not c.ok, "seconds": time.perf_counter() - t0,
            "warning": c.warnings[0] if c.warnings else ""}


def wrong_cameras(camera) -> dict:
    from decode_mem.io.camera import Camera

    return {"e-/ADU x2": replace(camera, e_per_adu=2 * camera.e_per_adu),
            "e-/ADU x0.5": replace(camera, e_per_adu=0.5 * camera.e_per_adu), "sCMOS preset": Camera.scmos()}


def real_movie() -> dict | None:
    """Neighbour correlations and the three estimates' ratios on the real movie, with a camera of gain 1."""
    if not REAL.is_file():
        return None
    import tifffile

    from decode_mem.calibrate.background import QuietStats
    from decode_mem.calibrate.noise import AXES, NoiseEstimate, SpatialNoiseStats, excess_ratio

    adu = tifffile.imread(REAL).astype(np.float64)
    photons = adu - np.percentile(adu, 1)  # a baseline below the data; the ratios compare, not judge
    diff = photons[1:] - photons[:-1]
    med = np.median(diff)
    mad = 1.4826 * np.median(np.abs(diff - med))
    out = {}
    for name, (dy, dx) in {"along rows": (0, 1), "down columns": (1, 0)}.items():
        a, b = diff[:, :diff.shape[1] - dy, :diff.shape[2] - dx], diff[:, dy:, dx:]
        calm = (np.abs(a - med) < 3 * mad) & (np.abs(b - med) < 3 * mad)  # spots' light left out
        out[f"correlation {name}"] = float(np.corrcoef(a[calm], b[calm])[0, 1])
    calm = np.abs(photons - np.median(photons)) < 3 * 1.4826 * np.median(np.abs(photons - np.median(photons)))
    quiet, spatial = QuietStats(photons.shape[1:]), SpatialNoiseStats(photons.shape[1:])
    quiet.add(photons, calm)
    spatial.add(photons, calm)
    out["temporal"] = excess_ratio(NoiseEstimate(quiet.mean(), quiet.variance(), "temporal"), 1.0, 0.0)
    for name in AXES:
        out[name] = excess_ratio(spatial.estimate(name), 1.0, 0.0)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="two cases, two densities: checks that the script runs")
    p.add_argument("--out", default=str(RESULTS / "camera_noise.md"))
    args = p.parse_args(argv)
    at, load_start, t_start = commit(), load_average(), time.perf_counter()
    cases = dict(list(CASES.items())[1:3]) if args.quick else CASES
    densities = (1.0, 3.0) if args.quick else DENSITIES
    rows = []
    for k, (name, case) in enumerate(cases.items()):
        for j, density in enumerate(densities):
            adu, camera = movie(case, density, max(SAMPLES.values()), seed=100 * k + j)
            for sample, frames in SAMPLES.items():
                rows.append({"psf": name, "density": density, "camera": "right", "sample": sample,
                             **check(adu, camera, frames)})
            if density == max(densities):
                for label, wrong in wrong_cameras(camera).items():
                    rows.append({"psf": name, "density": density, "camera": label, "sample": "domain check "
                                 "(10 frames)", **check(adu, wrong, 10)})
    real = real_movie()
    total = time.perf_counter() - t_start
    machine = machine_line("no torch work (numpy/scipy)", load_start=load_start, at=at)
    write_report(Path(args.out), rows, real, machine, total, command_line(argv))
    return 0


def write_report(out: Path, rows: list[dict], real: dict | None, machine: str, total: float, command: str) -> None:
    right = [r for r in rows if r["camera"] == "right"]
    wrong = [r for r in rows if r["camera"] != "right"]
    lines = ["# The camera check on dense and 3-D movies", "", f"Command: `{command}`  ", f"Machine: {machine}  ",
             f"Run time: {total:.0f} s", "",
             "Movies: 128² px, default EMCCD, 5000 ± 1500 photons on 50 photons/px (as `bench_3d`). *Over time*: "
             "measured / predicted noise variance from the quiet pixels' variance over time, the only estimate "
             "before `calibrate.noise` (outside 2/3..3/2 it warned); *now*: the estimate the check uses "
             "(`temporal`, or the fourth difference across pixels, `vertical`/`horizontal`, the larger of the two "
             "directions, where it is lower than the temporal one: `decode_mem/calibrate/noise.py`).", "",
             "## The camera that recorded the movie (no check should warn)", "",
             "| PSF | emitters/µm² | sample | over time | would have warned | now | method | warns | s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in right:
        lines.append(f"| {r['psf']} | {r['density']:g} | {r['sample']} | {r['quiet']:.2f} | "
                     f"{'**yes**' if r['quiet_warned'] else 'no'} | {r['ratio']:.2f} | {r['method']} | "
                     f"{'**yes**' if r['warned'] else 'no'} | {r['seconds']:.2f} |")
    old = sum(r["quiet_warned"] for r in right)
    new = sum(r["warned"] for r in right)
    lines += ["", f"False alarms: {old} of {len(right)} checks from the variance over time alone; {new} of "
              f"{len(right)} now.", "", "## A wrong camera on the densest movies (every check should warn)", "",
              "| PSF | emitters/µm² | camera given | over time | now | method | warns | first warning |",
              "|---|---|---|---|---|---|---|---|"]
    for r in wrong:
        lines.append(f"| {r['psf']} | {r['density']:g} | {r['camera']} | {r['quiet']:.2f} | {r['ratio']:.2f} | "
                     f"{r['method']} | {'yes' if r['warned'] else '**no**'} | {r['warning'][:110]} |")
    lines += ["", f"Wrong cameras named: {sum(r['warned'] for r in wrong)} of {len(wrong)} (the ratio now follows "
              "the error: 2x, 0.5x; over time it read the light of the spots on top of it).", ""]
    if real is not None:
        lines += ["## The real EMCCD movie (`shared/data/real`, 5 frames)", "",
                  f"Correlation of neighbouring pixels (frame differences, spots left out): along rows "
                  f"{real['correlation along rows']:+.3f}, down columns {real['correlation down columns']:+.3f}.",
                  "", "Noise variance over light (a camera of gain 1: only the agreement counts): over time "
                  f"{real['temporal']:.2f}, across columns (`vertical`) {real['vertical']:.2f}, along rows "
                  f"(`horizontal`) {real['horizontal']:.2f} — the difference along the correlated rows reads low, "
                  "which is why the larger direction is taken.", ""]
    else:
        lines += ["The real EMCCD movie was not found: not measured.", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    write_report_files(out, lines, lambda path: _plot(right, path), {"command": command, "machine": machine,
                                                                      "checks": rows, "real_movie": real})


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from decode_mem.calibrate.camera_check import NOISE_RATIO_OK
    from decode_mem.report.figures import png_bytes

    psfs = list(dict.fromkeys(r["psf"] for r in rows))
    fig, axes = plt.subplots(1, len(SAMPLES), figsize=(5.5 * len(SAMPLES), 4), sharey=True)
    for ax, sample in zip(np.atleast_1d(axes), SAMPLES, strict=True):
        ax.axhspan(*NOISE_RATIO_OK, color="0.9", label="no warning")
        for i, psf in enumerate(psfs):
            sel = [r for r in rows if r["psf"] == psf and r["sample"] == sample]
            d = [r["density"] for r in sel]
            ax.plot(d, [r["quiet"] for r in sel], "--", color=f"C{i}", marker="o")
            ax.plot(d, [r["ratio"] for r in sel], "-", color=f"C{i}", marker="s", label=psf)
        ax.set_yscale("log")
        ax.set_xlabel("emitters / µm²")
        ax.set_title(f"{sample}: dashed over time, solid now")
    np.atleast_1d(axes)[0].set_ylabel("measured / predicted noise (right camera)")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    path.write_bytes(png_bytes(fig))
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
