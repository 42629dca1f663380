"""Throughput: frames/s, MB/s and localizations/s of decode_mem against its earlier version and Picasso.

    python benchmarks/bench_throughput.py [--baseline-checkout DIR]    # benchmarks/results/throughput.md + .png

1. **End to end** (the user's command, start-up included): ``python -m decode_mem.infer MOVIE --out DIR`` with
   its defaults on uint16 movies, this version and — with ``--baseline-checkout`` (a checkout of an earlier
   commit, e.g. ``git worktree add /tmp/old ba2ec79``) — the earlier one, side by side in this run; Picasso
   (identify + LQ fit, multi-threaded on the same cores; own interpreter, see ``picasso_runner.py``) on the
   same movies, at the box and minimum net gradient that give it its best Jaccard on this physics, tuned as
   ``bench_generalize`` tunes them: on a separate 256² movie (a quarter of the test movie's frames) of the same
   physics with another seed, against its ground truth (the movies differ only in size, so one tuning serves
   all three). Its frames/s time only identify + fit on the test movie at those settings; the tuning's time is
   given beside the table, and its Jaccard on each test movie (against that movie's ground truth) in its row.
   Peak RssAnon of each process is sampled from /proc every 10 ms. This version runs twice on each movie: first
   with an empty plan cache (``DECODE_MEM_CACHE``: what a new user's first run pays for choosing its sizes — the
   memory traces and timed units), then again with the sizes it remembered. **Same emitters**: with a baseline,
   this version also runs on the baseline's own model file, and its localizations are matched to the
   baseline's (tolerance 10 nm): Jaccard and RMSE between the two outputs (1 and 0 nm: nothing moved). A third
   run of this version adds ``--streams 2`` (two blocks computed at once, each on half the threads; ``auto``
   plans its sizes for two streams from the remembered traces); its emitters are matched in the same way to the
   one-stream repeat.
2. **Engine grid**: ``predict_stack`` on 64², 256² and 2048² frames across precisions (fp32, bf16; fp16 on CUDA),
   tile sizes and the DECODE-style recompute path (every frame through the frame U-Net three times), each in a
   fresh process: frames/s, MB/s, localizations/s, peak host RssAnon and (CUDA) device memory.

Every number comes from the run that wrote the report; rows that could not be measured here say so.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from command_line import command_line
from machine import commit, cpu_name, machine_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MOVIES = {"64x64": ((64, 64), 400), "256x256": ((256, 256), 400), "2048x2048": ((2048, 2048), 12)}
GRID = [  # (movie, chunk, precision, reuse features)
    ("64x64", 512, "fp32", True), ("64x64", 512, "fp32", False),
    ("256x256", 512, "fp32", True), ("256x256", 128, "fp32", True), ("256x256", 512, "bf16", True),
    ("256x256", 512, "fp32", False),
    ("2048x2048", 512, "fp32", True), ("2048x2048", 256, "fp32", True), ("2048x2048", 512, "fp32", False),
]
STREAMS_LABEL = "decode_mem (this version, repeat, --streams 2)"
CUDA_GRID = [("256x256", 512, "fp16", True), ("2048x2048", 512, "bf16", True), ("2048x2048", 512, "fp16", True),
             ("2048x2048", 1024, "bf16", True)]


def timed(cmd: list[str], env: dict | None = None, cwd: Path = ROOT,
          cap_mib: float | None = None) -> tuple[float, float, str | None]:
    """(wall seconds, peak RssAnon MiB, stdout) of a command; stdout is None when it was stopped for passing
    ``cap_mib`` of RssAnon (so that one run cannot take the machine down with it)."""
    from decode_mem.memory import ProcessPeak

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watcher = ProcessPeak(proc, cap_mb=cap_mib)
    out, err = proc.communicate()
    seconds = time.perf_counter() - t0
    peak = watcher.join() or 0.0
    if watcher.capped:
        return seconds, peak, None
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed:\n{err[-3000:]}")
    return seconds, peak, out


def same_emitters(new_csv: Path, old_csv: Path, pixel_size: float) -> dict:
    """Jaccard and lateral RMSE (nm) between two localization files, matched within 10 nm."""
    from decode_mem.evaluate.files import evaluate_files

    m = evaluate_files(new_csv, old_csv, pixel_size=pixel_size, tolerance_lat=10.0)
    return {"jaccard": m.jaccard, "rmse_nm": m.rmse_lat}


def worker(spec: dict) -> None:
    """One engine measurement in a fresh process; prints one JSON line."""
    import torch

    from decode_mem.infer import predict_stack
    from decode_mem.io import open_stack
    from decode_mem.io.table import EmitterTable
    from decode_mem.memory import PeakSampler
    from decode_mem.model.checkpoint import load_model

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    device = torch.device(spec["device"])
    model = load_model(spec["model"], device=device)
    kw = dict(chunk_size=spec["chunk"], batch_size="auto", amp={"fp32": "off"}.get(spec["precision"],
                                                                                   spec["precision"]),
              device=device, compile=False, memory_limit=int(spec["memory_limit_gib"] * 2**30))
    with open_stack(spec["movie"]) as stack:
        list(predict_stack(stack[:4], model, **kw))  # warm-up: kernels chosen, not timed
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        plans: list = []
        import decode_mem.infer.predict as predict_module

        original = predict_module.TiledExecutor
        if not spec["reuse"]:  # the DECODE-style recompute path: the executor's reuse switched off
            predict_module.TiledExecutor = lambda net, shape, config, **k: original(
                net, shape, dataclasses.replace(config, reuse_features=False), **k)
        with PeakSampler(0.01) as sampler:
            t0 = time.perf_counter()
            table = EmitterTable.concat(predict_stack(stack, model, on_plan=plans.append, **kw))
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
        predict_module.TiledExecutor = original
        frames = stack.shape[0]
    result = {"seconds": seconds, "frames": frames, "locs": len(table), "peak_mb": sampler.peak["rss_anon_mb"],
              "batch": plans[0].plan.batch_size, "tiles": plans[0].plan.n_tiles}
    if device.type == "cuda":
        result["device_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(result))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(ROOT / "data" / "models" / "default_2d.pt"))
    p.add_argument("--baseline-checkout", help="a checkout of an earlier commit to compare end to end")
    p.add_argument("--picasso-python", help="interpreter with picassosr (see picasso_runner.py)")
    p.add_argument("--quick", action="store_true", help="small movies (a smoke run)")
    p.add_argument("--grid-budget", type=float, default=4.0,
                   help="GiB: predict_stack's memory_limit in the engine grid (the sizes there are given, not auto)")
    p.add_argument("--memory-cap", type=float, default=12.0,
                   help="GiB of RssAnon at which an end-to-end run is stopped and reported as such")
    p.add_argument("--no-streams", action="store_true", help="leave out the end-to-end runs with --streams 2")
    p.add_argument("--out", default=str(RESULTS / "throughput.md"))
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return 0

    import torch

    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.stack import simulate_stack

    sys.path.insert(0, str(Path(__file__).parent))
    from picasso_runner import camera_settings, find_picasso_python, picasso_version, run_picasso, table_from

    from decode_mem.evaluate import evaluate
    from decode_mem.io.localizations import read_localizations

    python = find_picasso_python(args.picasso_python)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    device_names = {"cpu": cpu_name(), **({"cuda": torch.cuda.get_device_name(0)} if "cuda" in devices else {})}
    movies = {k: ((v[0][0] // 4 or 16, v[0][1] // 4 or 16), max(8, v[1] // 20)) for k, v in MOVIES.items()} \
        if args.quick else MOVIES
    t_all = time.perf_counter()
    e2e, grid = [], []
    with tempfile.TemporaryDirectory(prefix="bench_throughput_") as tmp:
        work = Path(tmp)
        paths = {}
        for name, (shape, frames) in movies.items():
            sim = SimulationConfig(frame_size=shape, density=1.0, margin=6.0)
            paths[name] = work / f"{name}.tif"
            simulate_stack(sim, frames, paths[name], work / f"{name}_gt.csv", seed=1)
        cam = SimulationConfig().camera
        tuning = None
        if python is not None:
            shape, frames = movies["256x256"][0], max(8, movies["256x256"][1] // 4)  # ~60k emitters in the full run
            tuning = tune_picasso_settings(python, SimulationConfig(frame_size=shape, density=1.0, margin=6.0),
                                           frames, work)
            print(f"Picasso tuned on {shape[0]}x{shape[1]} x {frames} (seed 2): box {tuning['box']}, min ng "
                  f"{tuning['ng']:.0f}, Jaccard {tuning['jaccard']:.3f}, {tuning['seconds']:.0f} s", flush=True)
        for name, path in paths.items():
            shape, frames = movies[name]
            mb = frames * shape[0] * shape[1] * 2 / 1e6
            fresh = dict(os.environ, DECODE_MEM_CACHE=str(work / f"plan_cache_{name}.json"))  # empty at first

            def this_version(out: str, model: str = args.model, movie: Path = path) -> list[str]:
                return [sys.executable, "-m", "decode_mem.infer", str(movie), "--model", model, "--out",
                        str(work / out), "--quiet"]

            runs = [("decode_mem (this version, first run)", this_version(f"new_{name}"), fresh, ROOT),
                    ("decode_mem (this version, repeat)", this_version(f"again_{name}"), fresh, ROOT)]
            if not args.no_streams:
                runs.append((STREAMS_LABEL, [*this_version(f"streams_{name}"), "--streams", "2"], fresh, ROOT))
            if args.baseline_checkout:
                base = Path(args.baseline_checkout)
                env = dict(os.environ, PYTHONPATH=str(base))
                old_model = str(base / "data" / "models" / "default_2d.pt")
                runs.append((f"decode_mem ({commit(base)}, before)", [
                    sys.executable, "-m", "decode_mem.infer", str(path), "--model", old_model,
                    "--out", str(work / f"old_{name}"), "--quiet"], env, base))
                runs.append(("decode_mem (this version, the earlier model)", this_version(f"same_{name}", old_model),
                             fresh, ROOT))
            for label, cmd, env, cwd in runs:
                try:
                    seconds, peak, out = timed(cmd, env, cwd, cap_mib=args.memory_cap * 1024)
                except SystemExit as e:  # e.g. a setting the command refuses: reported, the other rows still run
                    reason = str(e).strip().splitlines()[-1].strip().replace(f"{work}/", "")
                    e2e.append({"movie": name, "method": label, "frames": frames, "mb": mb, "failed": reason})
                    print(f"{name} {label}: failed: {reason}", flush=True)
                    continue
                row = {"movie": name, "method": label, "seconds": seconds, "frames": frames, "mb": mb,
                       "peak_mb": peak, "stopped": out is None}
                if out is None:
                    print(f"{name} {label}: stopped after {seconds:.0f} s at {peak:.0f} MiB RssAnon", flush=True)
                else:
                    out_dir = Path(cmd[cmd.index("--out") + 1])
                    row["locs"] = json.loads((out_dir / f"{path.stem}.json").read_text())["localizations"]
                    print(f"{name} {label}: {frames / seconds:.2f} frames/s", flush=True)
                    before = [r for r in e2e if r["movie"] == name and "before" in r["method"]]
                    if "earlier model" in label and not _unmeasured(before[0]):
                        row.update(same_emitters(out_dir / f"{path.stem}.csv",
                                                 work / f"old_{name}" / f"{path.stem}.csv", cam.pixel_size))
                    repeat = [r for r in e2e if r["movie"] == name and "this version, repeat)" in r["method"]]
                    if label == STREAMS_LABEL and not _unmeasured(repeat[0]):  # against the one-stream repeat
                        row.update(same_emitters(out_dir / f"{path.stem}.csv",
                                                 work / f"again_{name}" / f"{path.stem}.csv", cam.pixel_size))
                e2e.append(row)
            if tuning is not None:  # at the tuned settings; only identify + fit on this movie are timed
                box, ng = tuning["box"], tuning["ng"]
                res = run_picasso(python, path, [box], ng, camera_settings(cam), work, threaded=True)
                table = table_from(res, box, ng)
                truth = read_localizations(work / f"{name}_gt.csv", pixel_size=cam.pixel_size)
                jac = evaluate(table, truth, pixel_size=cam.pixel_size).jaccard
                e2e.append({"movie": name, "method": f"Picasso (tuned: box {box}, min ng {ng:.0f}; threaded; "
                            f"Jaccard {jac:.3f})", "seconds": float(res[f"{box}_seconds"]), "frames": frames,
                            "mb": mb, "locs": len(table), "peak_mb": None})
                print(f"{name} Picasso: {frames / float(res[f'{box}_seconds']):.2f} frames/s, Jaccard {jac:.3f}",
                      flush=True)
        for device in devices:
            specs = GRID + (CUDA_GRID if device == "cuda" else [])
            for movie, chunk, precision, reuse in specs:
                spec = {"movie": str(paths[movie]), "model": args.model, "chunk": chunk, "precision": precision,
                        "reuse": reuse, "device": device, "threads": None, "memory_limit_gib": args.grid_budget}
                shape, frames = movies[movie]
                row = {"device": device, "movie": movie, "chunk": chunk, "precision": precision,
                       "path": "reuse" if reuse else "recompute (DECODE)",
                       "mb": frames * shape[0] * shape[1] * 2 / 1e6}
                try:
                    _, _, out = timed([sys.executable, __file__, "--worker", json.dumps(spec)])
                except SystemExit as e:  # one row that fails is reported as such; the others still run
                    row["failed"] = str(e).strip().splitlines()[-1]
                    print(f"{device} {movie} chunk {chunk} {precision}: failed: {row['failed']}", flush=True)
                else:
                    row.update(json.loads(out.strip().splitlines()[-1]))
                    print(f"{device} {movie} chunk {chunk} {precision} {'reuse' if reuse else 'recompute'}: "
                          f"{row['frames'] / row['seconds']:.2f} frames/s", flush=True)
                grid.append(row)
    write_report(Path(args.out), e2e, grid, devices, device_names, python, args, time.perf_counter() - t_all,
                 picasso_version(python) if python else None, tuning)
    return 0


def tune_picasso_settings(python: str, sim, frames: int, work: Path) -> dict:
    """Picasso's box and minimum net gradient with the best Jaccard on a movie of ``sim`` with another seed than
    the test movies (2 against 1), against its ground truth (``picasso_runner.tune_picasso``, as
    ``bench_generalize`` uses it); every box fitted once, multi-threaded. Its seconds (simulation left out)
    are reported apart from Picasso's frames/s."""
    from picasso_runner import BOXES, NG_FLOOR, camera_settings, run_picasso, tune_picasso

    from decode_mem.io.localizations import read_localizations
    from decode_mem.simulate.stack import simulate_stack

    stack, gt = work / "picasso_tune.tif", work / "picasso_tune_gt.csv"
    simulate_stack(sim, frames, stack, gt, seed=2)
    t0 = time.perf_counter()
    res = run_picasso(python, stack, list(BOXES), NG_FLOOR, camera_settings(sim.camera), work, threaded=True)
    box, ng, jac = tune_picasso(res, read_localizations(gt, pixel_size=sim.camera.pixel_size),
                                sim.camera.pixel_size)
    return {"box": box, "ng": ng, "jaccard": jac, "seconds": time.perf_counter() - t0, "frames": frames,
            "shape": tuple(sim.frame_size), "boxes": BOXES, "ng_floor": NG_FLOOR}


def write_report(out: Path, e2e: list[dict], grid: list[dict], devices: list[str], names: dict, python: str | None,
                 args: argparse.Namespace, total: float, picasso: str | None, tuning: dict | None) -> None:
    import torch

    from decode_mem.io.atomic import atomic_output

    def fps(r: dict) -> str:
        return f"{r['frames'] / r['seconds']:.2f}"

    lines = [
        "# Throughput",
        "",
        "Command: `" + command_line() + f"`; {total / 60:.1f} min in all.",
        f"Machine: {machine_line(f'{torch.get_num_threads()} torch threads by default', gpu=names.get('cuda'))}"
        + (f"; {picasso}." if picasso else "; Picasso: not installed."),
        "",
        __doc__.split("\n\n", 2)[2].strip(),
        "",
        "## End to end (the whole command)",
        "",
        "| movie | method | frames/s | MB/s | localizations/s | peak RssAnon (MiB) | same emitters (Jaccard, "
        "RMSE; the earlier model against the earlier version, --streams 2 against the repeat) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in e2e:
        if "failed" in r:
            lines.append(f"| {r['movie']} | {r['method']} | failed: {r['failed']} | – | – | – | – |")
            continue
        peak = "–" if r["peak_mb"] is None else f"{r['peak_mb']:.0f}"
        same = f"{r['jaccard']:.4f}, {r['rmse_nm']:.3f} nm" if "jaccard" in r else "–"
        if r.get("stopped"):
            lines.append(f"| {r['movie']} | {r['method']} | stopped after {r['seconds']:.0f} s: RssAnon passed "
                         f"the {args.memory_cap:g} GiB cap | – | – | > {peak} | – |")
            continue
        lines.append(f"| {r['movie']} | {r['method']} | {fps(r)} | {r['mb'] / r['seconds']:.2f} "
                     f"| {r['locs'] / r['seconds']:.0f} | {peak} | {same} |")
    ratios = []
    for movie in dict.fromkeys(r["movie"] for r in e2e):
        old = next((r for r in e2e if r["movie"] == movie and "before" in r["method"]), None)
        for run in ("first run", "repeat", "repeat, --streams 2"):
            new = next((r for r in e2e if r["movie"] == movie and f"this version, {run})" in r["method"]), None)
            if new and old and not (_unmeasured(new) or _unmeasured(old)):
                ratios.append(f"{movie} ({run}): {old['seconds'] / new['seconds']:.2f}x")
            elif new and old:
                ratios.append(f"{movie} ({run}): not comparable (a run failed or was stopped at the memory cap)")
    if tuning is not None:
        h, w = tuning["shape"]
        lines += ["", f"Picasso's settings: box {tuning['box']}, minimum net gradient {tuning['ng']:.0f} — the best "
                  f"Jaccard ({tuning['jaccard']:.3f}) over boxes {', '.join(map(str, tuning['boxes']))} and 80 "
                  f"thresholds from {tuning['ng_floor']:g} on a {h}×{w} × {tuning['frames']} movie of the same "
                  f"physics (seed 2; the test movies seed 1). Tuning took {tuning['seconds']:.1f} s (every box "
                  "identified and fitted multi-threaded, then the thresholds scored); not in Picasso's frames/s."]
    else:
        lines += ["", "Picasso: not measured (not installed)."]
    lines += ["", "Speed-up of this version over the earlier one, end to end: "
              + (", ".join(ratios) if ratios else "not measured (no --baseline-checkout)") + ".", ""]
    streams = []
    for movie in dict.fromkeys(r["movie"] for r in e2e):
        one = next((r for r in e2e if r["movie"] == movie and "this version, repeat)" in r["method"]), None)
        two = next((r for r in e2e if r["movie"] == movie and r["method"] == STREAMS_LABEL), None)
        if one and two and not (_unmeasured(one) or _unmeasured(two)):
            streams.append(f"{movie} {one['seconds'] / two['seconds']:.2f}x")
    lines += ["Two streams over one (the repeats), end to end: "
              + (", ".join(streams) if streams else "not measured") + ".", ""]
    lines += [f"## Engine grid (predict_stack, fresh process per row, 'auto' batch within a {args.grid_budget:g} GiB "
              "budget)", "",
              "| device | movie | tile core | precision | path | batch | frames/s | MB/s | localizations/s "
              "| peak RssAnon (MiB) | peak device (MiB) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in grid:
        if "failed" in r:
            lines.append(f"| {r['device']} | {r['movie']} | {r['chunk']} | {r['precision']} | {r['path']} | – "
                         f"| failed: {r['failed']} | – | – | – | – |")
            continue
        dev = "–" if "device_peak_mb" not in r else f"{r['device_peak_mb']:.0f}"
        lines.append(f"| {r['device']} | {r['movie']} | {r['chunk']} | {r['precision']} | {r['path']} | {r['batch']} "
                     f"| {fps(r)} | {r['mb'] / r['seconds']:.2f} | {r['locs'] / r['seconds']:.0f} "
                     f"| {r['peak_mb']:.0f} | {dev} |")
    if "cuda" not in devices:
        lines += ["", "GPU rows: **not measured** — no CUDA device on this machine. The GPU goal (2048² at 100 "
                  "frames/s ≈ 840 MB/s on one H100) is unverified."]
    png = out.with_suffix(".png")
    _plot(e2e, grid, png)
    lines += ["", f"![throughput]({png.name})", ""]
    with atomic_output(out) as tmp:
        tmp.write_text("\n".join(lines))
    with atomic_output(out.with_suffix(".json")) as tmp:  # the rows, to redraw or compare without a re-run
        tmp.write_text(json.dumps({"end_to_end": e2e, "grid": grid}, indent=1, default=str) + "\n")
    print(f"wrote {out}, its .json and {png}")


def _unmeasured(row: dict) -> bool:
    """An end-to-end row without a speed: the command failed, or was stopped at the memory cap."""
    return "failed" in row or bool(row.get("stopped"))


def _short_method(method: str) -> str:
    """A plot label for an end-to-end row: 'decode_mem, repeat, --streams 2', 'Picasso (tuned)'."""
    if method.startswith("Picasso"):
        return "Picasso (tuned)"
    return method.replace(" (this version, ", ", ").replace(" (", ", ").rstrip(")")


def _plot(e2e: list[dict], grid: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    from decode_mem.io.atomic import atomic_output

    fig = Figure(figsize=(12, 5))
    ax_e, ax_g = fig.subplots(1, 2)
    e2e = [r for r in e2e if not _unmeasured(r)]
    labels = [f"{r['movie']}\n{_short_method(r['method'])}" for r in e2e]
    ax_e.barh(np.arange(len(e2e)), [r["frames"] / r["seconds"] for r in e2e], color="C0")
    ax_e.set_yticks(np.arange(len(e2e)), labels, fontsize=7)
    ax_e.set(xlabel="frames/s (whole command)", xscale="log", title="end to end")
    grid = [r for r in grid if "failed" not in r]
    labels = [f"{r['device']} {r['movie']} {r['chunk']} {r['precision']} {r['path'][:9]}" for r in grid]
    ax_g.barh(np.arange(len(grid)), [r["frames"] / r["seconds"] for r in grid], color="C1")
    ax_g.set_yticks(np.arange(len(grid)), labels, fontsize=7)
    ax_g.set(xlabel="frames/s (engine)", xscale="log", title="engine grid")
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")


if __name__ == "__main__":
    raise SystemExit(main())
