"""Drift correction: decode_mem (leave-one-out, RCC) vs Picasso's RCC ``undrift`` on the same localizations.

    python benchmarks/bench_drift.py            # writes benchmarks/results/drift.md + .png

Localizations are the ground truth of simulated structures of repeatedly blinking sites (rings of 8, origami
grids, filaments; ``decode_mem.simulate``) under a smooth stage drift, with Gaussian localization noise of
``--noise`` nm added, so every method sees exactly the same localizations and the true drift is known. RMSE is
x and y together against the true drift, each curve's mean removed (a drift estimate's offset is arbitrary).
Picasso runs in its own interpreter (``picasso_runner.py``) with its defaults and the same number of segments.
Memory: ``python -m decode_mem.drift`` on ``--big`` localizations (a parquet file), peak RssAnon sampled from
/proc. Every number below comes from this run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_throughput import timed
from command_line import command_line
from machine import machine_line
from picasso_runner import find_picasso_python, picasso_version, run_undrift

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CASES = (  # name, structure, frames, drift nm per 1000 frames
    ("rings, 1000 frames", "rings", 1000, 100.0),
    ("grids, 1000 frames", "grids", 1000, 100.0),
    ("filaments, 1000 frames", "filaments", 1000, 100.0),
    ("rings, 5000 frames", "rings", 5000, 100.0),
    ("rings, 1000 frames, 400 nm", "rings", 1000, 400.0),
)


def localizations(structure: str, frames: int, drift_nm: float, noise: float, seed: int):
    """(EmitterTable in px with noise, true drift (frames, 2) nm, pixel size nm, frame size)."""
    from decode_mem.io.table import EmitterTable
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.movie import MovieSimulator

    density = 0.3 if structure == "filaments" else 1.5
    cfg = SimulationConfig(frame_size=(128, 128), structure={"kind": structure, "off_time": 50.0, "density": density},
                           drift_nm=drift_nm, drift_frames=1000)
    sim = MovieSimulator(cfg, seed=seed)
    gt = EmitterTable.concat(b.gt for b in sim.blocks(frames, 250))
    px = sim.camera.pixel_size
    rng = np.random.default_rng(seed)
    noisy = {c: (gt[c] + rng.normal(0.0, noise / px, len(gt))).astype(np.float32) for c in ("x", "y")}
    sigma = np.full(len(gt), noise / px, np.float32)  # Picasso blurs segments by the localization precision
    table = EmitterTable({**gt.columns, **noisy, "sigma_x": sigma, "sigma_y": sigma})
    return table, sim.drift_nm(0, frames), px, cfg.frame_size


def rmse(estimate: np.ndarray, truth: np.ndarray) -> float:
    err = (estimate - estimate.mean(0)) - (truth - truth.mean(0))
    return float(np.sqrt(np.mean(np.sum(err**2, axis=1))))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--noise", type=float, default=10.0, help="localization noise, nm (default 10)")
    p.add_argument("--big", type=int, default=10_000_000, help="localizations for the memory run (0: skip)")
    p.add_argument("--picasso-python", help="interpreter with picassosr (see picasso_runner.py)")
    p.add_argument("--out", default=str(RESULTS / "drift.md"))
    args = p.parse_args(argv)
    args.command = command_line(argv)

    from decode_mem.drift import DriftConfig, estimate_drift
    from decode_mem.io.localizations import write_localizations

    python = find_picasso_python(args.picasso_python)
    rows, curves = [], {}
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_drift_") as tmp:
        work = Path(tmp)
        for i, (name, structure, frames, drift_nm) in enumerate(CASES):
            table, truth, px, shape = localizations(structure, frames, drift_nm, args.noise, seed=10 + i)
            row = {"case": name, "locs": len(table), "true span": float(np.ptp(truth, axis=0).max()),
                   "none": rmse(np.zeros_like(truth), truth)}
            x, y = table["x"] * px, table["y"] * px
            for method in ("loo", "rcc"):
                t0 = time.perf_counter()
                est = estimate_drift(table["frame"], x, y, DriftConfig(method=method), n_frames=frames)
                row[f"{method}_s"] = time.perf_counter() - t0
                row[method] = rmse(est.dxdy, truth)
                row[f"{method}_segments"] = len(est.centers)
                curves.setdefault(name, {"truth": truth})[f"decode_mem {method}"] = est.dxdy
            if python is not None:
                h5 = work / f"case{i}.hdf5"
                write_localizations(table, h5, pixel_size=px, width=shape[1], height=shape[0], frames=frames)
                segmentation = int(np.ceil(frames / row["rcc_segments"]))  # Picasso's RCC: as many as ours
                try:
                    drift, seconds = run_undrift(python, h5, segmentation, work)
                    row["picasso"], row["picasso_s"] = rmse(drift, truth), seconds
                    curves[name]["Picasso undrift"] = drift
                except RuntimeError as e:
                    row["picasso_error"] = str(e).splitlines()[-1][:200]
            rows.append(row)
            print(name, {k: v for k, v in row.items() if k != "case"}, flush=True)
        memory = big_run(args.big, work) if args.big else None
    write_report(Path(args.out), rows, curves, memory, args, python, time.perf_counter() - t_all)
    return 0


def big_run(n: int, work: Path) -> dict:
    """``python -m decode_mem.drift`` on ``n`` localizations of fixed sites under a drift: seconds, peak RssAnon."""
    from decode_mem.io.localizations import open_writer
    from decode_mem.io.table import EmitterTable
    from decode_mem.simulate.stage_drift import StageDrift

    rng = np.random.default_rng(0)
    px, frames, side = 100.0, 20_000, 512
    sites = rng.uniform(0, side, (200_000, 2))
    drift = StageDrift.draw(100.0, 1000.0, 0)
    path = work / "big.parquet"
    with open_writer(path, pixel_size=px, width=side, height=side, frames=frames) as writer:
        for start in range(0, n, 1_000_000):
            m = min(1_000_000, n - start)
            frame = np.sort(rng.integers(0, frames, m))
            pick = sites[rng.integers(0, len(sites), m)]
            d = drift(frame) / px
            xy = pick + d + rng.normal(0.0, 0.1, (m, 2))
            writer.write(EmitterTable.from_arrays(frame=frame, x=xy[:, 0], y=xy[:, 1],
                                                  photons=np.full(m, 1000.0)))
    seconds, peak, _ = timed([sys.executable, "-m", "decode_mem.drift", str(path), "--out", str(work / "big_out"),
                              "--quiet"])
    size = path.stat().st_size / 2**20
    return {"n": n, "seconds": seconds, "peak_mb": peak, "file_mb": size,
            "truth_rmse": rmse(np.loadtxt(work / "big_out" / "big_drift.csv", delimiter=",", skiprows=1)[:, 1:],
                               drift(np.arange(frames)))}


def write_report(out: Path, rows: list[dict], curves: dict, memory: dict | None, args: argparse.Namespace,
                 python: str | None, total: float) -> None:
    import torch

    from decode_mem.io.atomic import atomic_output

    def fmt(v: float | None, digits: int = 1) -> str:
        return "–" if v is None else f"{v:.{digits}f}"

    lines = ["# Drift correction", "",
             f"Command: `{args.command}`; "
             f"{total / 60:.1f} min in all. Machine: {machine_line(torch.get_num_threads())}; "
             f"Picasso: {picasso_version(python) if python else 'not installed'}.", "",
             __doc__.split("\n\n", 2)[2].strip(), "",
             "| case | localizations | true drift span (nm) | RMSE uncorrected (nm) | decode_mem loo: segments, RMSE "
             "(nm), time (s) | decode_mem rcc: segments, RMSE (nm), time (s) | Picasso undrift (rcc's segments): "
             "RMSE (nm), time (s) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        pic = fmt(r.get("picasso")) if "picasso" in r else ("failed: " + r["picasso_error"]
                                                             if "picasso_error" in r else "not run")
        lines.append(f"| {r['case']} | {r['locs']} | {r['true span']:.0f} | {r['none']:.1f} "
                     f"| {r['loo_segments']}, {r['loo']:.2f}, {r['loo_s']:.2f} "
                     f"| {r['rcc_segments']}, {r['rcc']:.2f}, {r['rcc_s']:.2f} "
                     f"| {pic}, {fmt(r.get('picasso_s'), 2)} |")
    wins = [r for r in rows if "picasso" in r]
    if wins:
        better = sum(r["loo"] < r["picasso"] for r in wins)
        better_rcc = sum(r["rcc"] < r["picasso"] for r in wins)
        lines += ["", f"Lower RMSE than Picasso's undrift: decode_mem loo in {better} of {len(wins)} cases, decode_mem "
                  f"rcc in {better_rcc} of {len(wins)}."]
    else:
        lines += ["", "Picasso comparison: not measured (no interpreter with picassosr found)."]
    if memory:
        lines += ["", f"Memory: `python -m decode_mem.drift` on {memory['n']:,} localizations ({memory['file_mb']:.0f} "
                  f"MiB parquet, 20,000 frames, 512x512 px field): {memory['seconds']:.1f} s, peak RssAnon "
                  f"{memory['peak_mb']:.0f} MiB ({memory['peak_mb'] * 2**20 / memory['n']:.1f} bytes per "
                  f"localization including the interpreter), drift RMSE {memory['truth_rmse']:.2f} nm."]
    else:
        lines += ["", "Memory at 10⁷ localizations: not measured in this run (--big 0)."]
    png = out.with_suffix(".png")
    _plot(curves, png)
    lines += ["", f"![drift curves]({png.name})", ""]
    with atomic_output(out) as tmp:
        tmp.write_text("\n".join(lines))
    print(f"wrote {out} and {png}")


def _plot(curves: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    from decode_mem.io.atomic import atomic_output

    fig = Figure(figsize=(12, 2.6 * len(curves)), layout="constrained")
    axes = fig.subplots(len(curves), 2, squeeze=False)
    for row, (name, c) in zip(axes, curves.items(), strict=True):
        truth = c["truth"]
        for axis, ax in enumerate(row):
            ax.plot(truth[:, axis] - truth[:, axis].mean(), "k--", linewidth=1.2, label="true")
            for label, est in c.items():
                if label != "truth":
                    ax.plot(est[:, axis] - est[:, axis].mean(), linewidth=1.0, label=label)
            ax.set(title=f"{name}: {'dx' if axis == 0 else 'dy'}", xlabel="frame", ylabel="nm (mean removed)")
            ax.grid(alpha=0.3)
        row[0].legend(fontsize="small")
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=90, format="png")


if __name__ == "__main__":
    raise SystemExit(main())
