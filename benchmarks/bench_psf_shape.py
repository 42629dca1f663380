"""The domain check's PSF shape test on 256² movies: false alarms, detection and its added cost.

    python benchmarks/bench_psf_shape.py [--frames 10] [--seeds 2]     # results/psf_shape.md

The model's PSF is calibrated from simulated beads, as the 3-D quick start does (``pipelines/astig3d.yaml``: 10
beads, 37 planes 30 nm apart, 30 000 photons, the quick start's aberrated astigmatic pupil PSF; ``decode_mem.psf``'s
``calibrate_beads``), so it carries a real calibration's errors; its z range is the quick start's ±400 nm. Movies
of 256² px (``decode_mem.simulate``, the default EMCCD, 5000 ± 1500 photons, background 100 photons/px) are
simulated with the quick start's PSF itself at six densities (false alarms: none may warn) and with other PSFs
(a double helix, a 2-D Gaussian of σ 1.3 px, astigmatism alone, astigmatism twice as strong, the quick start's
with the cylindrical lens turned by 90°) at 0.5 and 2 emitters/µm²; and a double-helix model on its own PSF
(not judged: a PSF of several lobes). Each movie's first frames go through the
domain check as ``infer`` runs it (``check_domain``), once without the PSF (the check before this test existed)
and once with it: its verdict, its numbers, and the seconds (wall and CPU of this process) it adds.

Every number comes from the run that wrote the report.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from command_line import command_line
from machine import commit, load_average, machine_line

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
QUICK_START = {"na": 1.45, "wavelength": 670.0, "n_immersion": 1.518, "astigmatism": 0.1, "spherical": 0.04,
               "coma": 0.02}
Z_RANGE = (-400.0, 400.0)
SAME_DENSITIES = (0.1, 0.3, 1.0, 2.0, 3.0, 4.0)
OTHER_DENSITIES = (0.5, 2.0)
OTHERS = {
    "double helix": {"psf": "pupil", "pupil": {"astigmatism": 0.0, "helix_zones": 3}},
    "2-D Gaussian σ 1.3 px": {"psf": "gauss2d", "psf_sigma": 1.3},
    "astigmatism 0.1 alone (no spherical, no coma)": {"psf": "pupil", "pupil": {"astigmatism": 0.1}},
    "astigmatism 0.2 (twice), spherical, coma": {"psf": "pupil", "pupil": {**QUICK_START, "astigmatism": 0.2}},
    "cylindrical lens turned 90° (astigmatism −0.1)": {"psf": "pupil",
                                                      "pupil": {**QUICK_START, "astigmatism": -0.1}},
}


def calibrated_psf(folder: Path) -> Path:
    """The quick start's PSF as its psf step measures it from simulated beads -> ``folder/psf.h5``."""
    import tifffile

    from decode_mem.io.psf_file import write_psf
    from decode_mem.psf.beads import BeadSettings, calibrate_beads
    from decode_mem.simulate import SimulationConfig
    from decode_mem.simulate.beads import simulate_bead_stack

    truth = SimulationConfig.from_dict({"psf": "pupil", "pupil": QUICK_START, "z_range": list(Z_RANGE),
                                        "frame_size": [96, 128]})
    rng = np.random.default_rng(0)
    roi, planes, z_step = 25, 37, 30.0
    half = roi // 2
    gx, gy = np.meshgrid(np.arange(half + 3, 128 - half - 3, roi + 3), np.arange(half + 3, 96 - half - 3, roi + 3))
    n = min(10, gx.size)
    x, y = gx.ravel()[:n] + rng.uniform(-0.5, 0.5, n), gy.ravel()[:n] + rng.uniform(-0.5, 0.5, n)
    z = (np.arange(planes) - (planes - 1) / 2) * z_step
    adu = simulate_bead_stack(truth, x, y, z, photons=30000.0, bg=20.0, offset=rng.normal(0.0, 10.0, n), seed=7)
    tifffile.imwrite(folder / "beads.tif", adu)
    cal = calibrate_beads([str(folder / "beads.tif")], truth.camera, BeadSettings(z_step=z_step, roi=roi))
    write_psf(folder / "psf.h5", cal.spline)
    return folder / "psf.h5"


def movie(frames: int, seed: int, density: float, psf: dict) -> tuple[np.ndarray, object]:
    from decode_mem.simulate import SimulationConfig, simulate_movie

    params = {"frame_size": [256, 256], "density": density, "bg": 100.0, "z_range": list(Z_RANGE), **psf}
    if params["psf"] == "gauss2d":
        params.pop("z_range")
    cfg = SimulationConfig.from_dict(params)
    return simulate_movie(cfg, frames, seed=seed)[0], cfg.camera


def measure(adu: np.ndarray, camera: object, reference: object) -> dict:
    """The domain check without and with the PSF: seconds (wall, CPU) and the PSF test's numbers."""
    from decode_mem.infer.domain import check_domain

    out = {}
    for name, psf in (("without", None), ("with", reference)):
        t0, c0 = time.perf_counter(), time.process_time()
        check = check_domain(adu, camera, {}, psf=psf)
        out[name] = (time.perf_counter() - t0, time.process_time() - c0)
        out["check"] = check
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=10, help="frames per movie (the check reads its first 6 at 256²)")
    p.add_argument("--seeds", type=int, default=2, help="seeds per density of the model's own PSF")
    p.add_argument("--out", default=str(RESULTS / "psf_shape.md"))
    args = p.parse_args()
    load_start, at = load_average(), commit()
    from decode_mem.infer.domain import ModelPsf
    from decode_mem.io.psf_file import read_psf
    from decode_mem.simulate.spline import SplinePSF

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = calibrated_psf(Path(tmp))
        reference = ModelPsf(SplinePSF(read_psf(path)), Z_RANGE)
        calib_s = time.perf_counter() - t0
    rows = []
    cases = [(f"own PSF, {d:g} /µm², seed {s}", s, d, {"psf": "pupil", "pupil": QUICK_START}, True)
             for d in SAME_DENSITIES for s in range(args.seeds)]
    cases += [(f"{name}, {d:g} /µm²", 0, d, psf, False) for name, psf in OTHERS.items() for d in OTHER_DENSITIES]
    from decode_mem.simulate import SimulationConfig

    helix = OTHERS["double helix"]
    helix_model = ModelPsf(SimulationConfig.from_dict({**helix, "z_range": list(Z_RANGE)}).spline_psf(), Z_RANGE)
    cases.append(("a double-helix model (its pupil spline) on its own PSF, 0.5 /µm²", 0, 0.5, helix, True))
    for name, seed, density, psf, same in cases:
        adu, camera = movie(args.frames, seed, density, psf)
        m = measure(adu, camera, helix_model if name.startswith("a double-helix model") else reference)
        shape = m["check"].numbers.get("psf_shape", {})
        rows.append((name, same, m, shape, m["check"].psf_mismatch))
        print(f"{name}: {shape}", flush=True)
    import torch

    machine = machine_line(torch.get_num_threads(), load_start=load_start, at=at)
    write(Path(args.out), rows, args.frames, calib_s, machine)


def write(out: Path, rows: list, frames: int, calib_s: float, machine: str) -> None:
    from decode_mem.calibrate.psf_shape import CHI2_SIGNIFICANT, MISFIT_LIMIT, Z_END, Z_END_LIMIT

    lines = ["# Domain check: do a movie's spots look like the 3-D model's PSF?", "",
             f"Command: `{command_line()}`", "", f"Machine: {machine}", "",
             f"The model's PSF: the 3-D quick start's aberrated astigmatic pupil PSF calibrated from 10 simulated "
             f"beads ({calib_s:.0f} s), z range ±400 nm. Movies 256² px × {frames} frames, default EMCCD, "
             "background 100 photons/px, 5000 ± 1500 photons; the domain check reads their first 6 frames. "
             f"Warns when the median misfit (light unexplained beyond the noise, RMS share of the spot's light) is "
             f"above {MISFIT_LIMIT:g} and the median reduced χ² above {CHI2_SIGNIFICANT:g}, or when more than "
             f"{Z_END_LIMIT:.0%} of the spots fit best within {Z_END:.0%} of the z range's ends.", "",
             "| movie | spots fitted | misfit (median) | reduced χ² (median) | z at the range's ends | warned | "
             "check without / with the PSF test, wall [s] | CPU [s] |", "|---|---|---|---|---|---|---|---|"]
    added_wall, added_cpu = [], []
    for name, same, m, shape, warned in rows:
        (w0, c0), (w1, c1) = m["without"], m["with"]
        added_wall.append(w1 - w0)
        added_cpu.append(c1 - c0)


        verdict = f"**yes**: {shape.get('verdict')}" if warned else "no"
        verdict += " (false alarm)" if warned and same else ""
        lines.append(f"| {name} | {shape.get('spots', 'n/a')} | {_num(shape, 'misfit_median', '.3f')} | "
                     f"{_num(shape, 'chi2_median', '.2f')} | {_num(shape, 'z_end_share', '.0%')} | {verdict} | "
                     f"{w0:.2f} / {w1:.2f} | {c0:.2f} / {c1:.2f} |")
    own_s = [r[3]["seconds"] for r in rows if "seconds" in r[3]]
    own = [r for r in rows if r[1]]
    others = [r for r in rows if not r[1]]
    lines += ["", f"- Own PSF: {sum(r[4] for r in own)} of {len(own)} movies warned (false alarms).",
              f"- Other PSFs: {sum(r[4] for r in others)} of {len(others)} warned.",
              f"- Cost of the PSF test at 256², timed inside the check (`domain.psf_shape.seconds` in each stack's "
              f"`<stem>.json`): median {np.median(own_s):.3f} s, at most {max(own_s):.3f} s wall (the spots' "
              f"photons, selection and fits). The whole check with − without it on the same movie: median "
              f"{np.median(added_wall):.2f} s wall, {np.median(added_cpu):.2f} s CPU (range {min(added_wall):.2f} "
              f"to {max(added_wall):.2f} s wall: the calibration's own run-to-run spread on this loaded machine). "
              "A `pupil` model also builds its spline once per run (a few seconds); a `spline` model reads it "
              "from its checkpoint.",
              "- The turned cylindrical lens: a purely astigmatic PSF turned by 90° is the same PSF at −z, so only "
              "the other aberrations (spherical, coma) can tell it apart.",
              "- A double-helix model is not judged (its spots are found lobe by lobe, a window around a lobe does "
              "not hold the PSF): the check neither warns on its own movies nor on others'."]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


def _num(shape: dict, key: str, fmt: str) -> str:
    v = shape.get(key)
    return format(v, fmt) if isinstance(v, (int, float)) else "n/a"


if __name__ == "__main__":
    main()
