"""CPU inference engines: torch (eager and compiled) against OpenVINO (fp32 and int8) and ONNX Runtime on the same
cores, in fp32 and, on a CPU with native bf16 (AVX-512 BF16 or AMX), torch and OpenVINO in bf16 too.

    python benchmarks/bench_cpu_engines.py [--threads 1,2] [--sizes 256,2048] [--frames 200] [--frames-2048 8]
                                           [--physics-frames 200] [--notes FILE] [--model PATH]
                                           # benchmarks/results/cpu_engines.md + .png + .json

1. **Network**: the planner's unit of work (``TiledExecutor.unit``, a block's steady state: ``batch`` new frames,
   two frames' features carried) of the shipped model on Poisson frames, 256² (chunk 256, batch 4: one tile) and
   2048² (chunk 512, batch 1: 16 tiles of 608²), per engine and thread count; the engines take turns, each
   ``--repeats`` times, and the least time is kept (wall and this process's CPU seconds). Frames/s are those of
   whole frames. The unit's arithmetic is counted by torch's ``FlopCounterMode`` (the same for every fp32 engine),
   so each row also gives GFLOP/s, read against the machine's **fp32 peak as measured here**: the best of
   ``torch.mm`` on 2048² fp32 matrices (oneDNN/MKL's sgemm, the best-tuned fp32 kernel on the machine) with the
   same threads; the bf16 rows against ``torch.mm`` of bf16 matrices. Beside it the largest difference of each
   variant's output from torch's fp32, per output channel.
2. **Whole command** (``python -m decode_mem.infer`` with ``--cmd-threads`` threads, default the cores, fixed
   sizes as the planner picks them here), at 256² (``--frames``, the sample stack tiled 4x4) and 2048²
   (``--frames-2048``, tiled 32x32): torch eager (today's default below ``COMPILE_MIN_WORK`` pixels of work),
   torch compiled (today's default from there on; its graphs already on disk, from a warm-up run of a movie of
   the same size and length), and each runtime (its converted network already cached; the one-off conversion
   timed apart), all with the default ``--amp auto`` (bf16 on a CPU with native bf16, where torch and OpenVINO
   also run ``--amp off``): frames/s, CPU seconds, peak RssAnon (sampled from /proc every 20 ms) against the
   plan, and the emitters against torch eager's (Jaccard and the largest shift, matched within 50 nm in the same
   frame).
3. **Accuracy on simulated physics** (``--physics-frames``; 0 skips): the reference physics of
   ``bench_accuracy`` at 0.2 / 1 / 2 emitters/µm² and four other physics of ``bench_generalize``, each movie
   localized by every engine and precision through ``predict_stack`` (same threads): Jaccard and lateral RMSE
   against the ground truth, and against torch's fp32 output (Jaccard, RMSE and mean shift of matched emitters, within
   50 nm); tuned Picasso (box and threshold tuned on a second movie of the same physics) on the same movies.
4. **int8** (``--engine openvino-int8``, where ``nncf`` is installed): a row in each part above, its network
   quantized once (``decode_mem.model.int8``; the whole first run timed with the conversions); its GOP/s read
   against OpenVINO's own int8 convolution of 256 channels (``int8_conv_gops``), and in the accuracy part also its
   photon counts against torch fp32's (mean and RMS of the ratio − 1 over matched emitters).

The report says what was not measured and the machine's load; ``--notes`` adds a file of earlier measurements,
marked so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from command_line import command_line
from machine import commit, load_average, machine_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_MODEL = "data/models/default_2d.pt (the shipped small model)"  # no --model (and records before it)
SIZES = {256: (256, 4), 2048: (512, 1)}  # frame side -> (chunk, batch): what the planner picks here (plan --no_probe)
CHANNELS = ("p_logit", "photons", "dx", "dy", "z", "sigma_photons", "sigma_x", "sigma_y", "sigma_z", "bg")


def engines_here() -> list[str]:
    from decode_mem.model.engine import QUANTIZED, RUNTIMES, installed

    return ["torch", *[r for r in (*RUNTIMES, *QUANTIZED) if installed(r)]]


def variants_here() -> list[tuple[str, str, str]]:
    """(label, engine, precision) of the network rows: every engine in fp32 (int8: its layers kept in float in
    fp32), and on a CPU with native bf16 torch (amp bf16: today's default there) and OpenVINO in bf16, int8 with its
    float layers in bf16 (ONNX Runtime's CPU provider has no bf16)."""
    from decode_mem.model.precision import cpu_has_native_bf16

    out = [(e, e, "fp32") for e in engines_here()]
    if cpu_has_native_bf16():
        out += [(f"{e} bf16", e, "bf16") for e in engines_here() if e in ("torch", "openvino", "openvino-int8")]
    return out


def int8_conv_gops(threads: int, channels: int = 256, side: int = 64, seconds: float = 3.0) -> float | None:
    """GOP/s of OpenVINO's int8 convolution (3x3, ``channels`` in and out, ``side``² px, quantized by NNCF as the
    engine quantizes) with ``threads`` threads, the best call of ``seconds``: the int8 rows' reference peak (wide
    convolutions keep the int8 kernels busiest; torch's own int8 matrix product on a CPU is a slow reference
    kernel). None without nncf."""
    import importlib.util

    if importlib.util.find_spec("nncf") is None:
        return None
    import contextlib
    import io
    import logging
    import warnings

    import nncf
    import openvino as ov
    import torch

    conv = torch.nn.Conv2d(channels, channels, 3, padding=1).eval()
    x = torch.randn(1, channels, side, side)
    nncf.set_log_level(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
        warnings.simplefilter("ignore")
        q = nncf.quantize(ov.convert_model(conv, example_input=x),
                          nncf.Dataset([torch.randn(1, channels, side, side).numpy() for _ in range(8)]),
                          subset_size=8, preset=nncf.QuantizationPreset.MIXED)
    k = ov.Core().compile_model(q, "CPU", {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1,
                                           "PERFORMANCE_HINT": "LATENCY"})
    a = x.numpy()
    k(a)
    best, end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        k(a)
        best = min(best, time.perf_counter() - t)
    return 2 * channels * channels * 9 * side * side / best / 1e9


def sgemm_gflops(threads: int, side: int = 2048, seconds: float = 3.0, dtype: str = "fp32") -> float:
    """GFLOP/s of ``torch.mm`` on ``side``² ``dtype`` matrices with ``threads`` threads, the best call of
    ``seconds``: the peak this machine's best-tuned kernel reaches in that precision (this VM reports no clock, so
    no peak is computed from the clock and the vector units)."""
    import torch

    torch.set_num_threads(threads)
    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    a, b = torch.randn(side, side).to(dt), torch.randn(side, side).to(dt)
    torch.mm(a, b)
    best, end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * side ** 3 / best / 1e9


def network(sides: list[int], threads: list[int], repeats: int,
            model_path: str | None = None) -> tuple[list[dict], list[dict], dict, dict]:
    """Rows of unit timings, of output differences from torch, and the sgemm peak GFLOP/s per thread count in fp32
    and in bf16 (empty without native bf16)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from decode_mem.model.checkpoint import load_model
    from decode_mem.model.engine import load_engine
    from decode_mem.postprocess import MARGIN
    from decode_mem.tiling import TiledExecutor
    from decode_mem.tiling.config import TileConfig

    model = load_model(model_path)
    net = model.net.eval().to(memory_format=torch.channels_last)
    rows, diffs, peak, peak_bf16, peak_int8 = [], [], {}, {}, {}
    cache = Path(tempfile.mkdtemp(prefix="bench_engines_"))
    variants = variants_here()
    precision_of = {label: precision for label, _, precision in variants}
    for n in threads:
        peak[n] = sgemm_gflops(n)
        if "bf16" in precision_of.values():
            peak_bf16[n] = sgemm_gflops(n, dtype="bf16")
        if any(name == "openvino-int8" for _, name, _ in variants):
            peak_int8[n] = int8_conv_gops(n)
        torch.set_num_threads(n)
        engines = {label: load_engine(name, net, n, cache, precision=precision, simulation=model.simulation)
                   for label, name, precision in variants}
        for side in sides:
            chunk, batch = SIZES[side]
            units, outs = {}, {}
            for name, eng in engines.items():
                amp = "bf16" if precision_of[name] == "bf16" else "off"  # torch bf16: the executor's autocast
                ex = TiledExecutor(net, (side, side), TileConfig(chunk_size=chunk, batch_size=batch, margin=MARGIN,
                                                                  amp=amp), engine=eng)
                group = ex._group(batch)
                gen = torch.Generator().manual_seed(0)
                data = torch.poisson(torch.full((group, batch + 2, *ex.grid.tile_shape), 20.0), generator=gen)
                units[name] = (ex.unit(batch, data=data, carried=True), batch * group / len(ex.grid), ex)
                out = units[name][0]()  # warm-up, and the output compared (a runtime's: an array of its own buffer)
                outs[name] = torch.tensor(out) if isinstance(out, np.ndarray) else out.float()
            with FlopCounterMode(display=False) as counter:  # the unit's arithmetic, the same for every engine
                units["torch"][0]()
            flops = counter.get_total_flops()
            wall = {k: [] for k in units}
            cpu = {k: [] for k in units}
            for _ in range(repeats):  # the engines take turns: a change in the machine's load hits all of them
                for name, (unit, _, _) in units.items():
                    t, c = time.perf_counter(), time.process_time()
                    unit()
                    wall[name].append(time.perf_counter() - t)
                    cpu[name].append(time.process_time() - c)
            for name, (_, frames, ex) in units.items():
                # torch follows the executor's amp; a runtime says what it compiled
                bf16 = precision_of[name] == "bf16" and getattr(engines[name], "precision", "bf16") == "bf16"
                kind = "int8" if getattr(engines[name], "precision", "") == "int8" else "bf16" if bf16 else "fp32"
                ref_peak = {"int8": peak_int8.get(n), "bf16": peak_bf16.get(n), "fp32": peak[n]}[kind] or float("nan")
                rows.append({"side": side, "threads": n, "engine": name, "precision": kind,
                             "tile": ex.grid.tile_shape[0],
                             "tiles": len(ex.grid), "wall_s": min(wall[name]), "cpu_s": min(cpu[name]),
                             "frames_per_s": frames / min(wall[name]), "frames_per_cpu_s": frames / min(cpu[name]),
                             "gflop_unit": flops / 1e9, "frames_unit": frames, "gflops": flops / min(wall[name]) / 1e9,
                             "peak_fraction": flops / min(wall[name]) / 1e9 / ref_peak})
                if name != "torch":
                    d = (outs[name] - outs["torch"]).abs().amax(dim=(0, 1, 3, 4))
                    diffs.append({"side": side, "threads": n, "engine": name, "max_abs": [float(v) for v in d]})
            print(f"network {side}² {n} thread(s): " + ", ".join(
                f"{r['engine']} {r['frames_per_s']:.3g} fr/s" for r in rows[-len(units):]), flush=True)
    return rows, diffs, peak, peak_bf16, peak_int8


def make_movie(path: Path, frames: int, side: int = 256, seed: int = 1) -> Path:
    """A simulated ``side``² movie of ``frames`` frames (1 emitter/µm², the default EMCCD, as ``bench_throughput``);
    returns its ground truth's path."""
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.stack import simulate_stack

    gt = path.with_name(path.stem + "_gt.csv")
    simulate_stack(SimulationConfig(frame_size=(side, side), density=1.0, margin=6.0), frames, path, gt, seed=seed)
    return gt


def rss_anon_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_infer(movie: Path, out: Path, engine: str, threads: int, env: dict, side: int = 256,
              compiled: bool = False, amp: str | None = None, model: str | None = None) -> dict:
    """One ``infer`` process (``amp`` None: the default, 'auto'; ``model`` None: infer's default)."""
    chunk, batch = SIZES[side]
    cmd = [sys.executable, "-m", "decode_mem.infer", str(movie), "--out", str(out), "--quiet", "--engine", engine,
           "--threads", str(threads), "--use_chunking", "--chunk_size", str(chunk), "--batch_size", str(batch),
           "--compile", "on" if compiled else "off", "--format", "csv", *(["--amp", amp] if amp else []),
           *(["--model", model] if model else [])]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    peak = [0.0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], rss_anon_mb(proc.pid))
            time.sleep(0.02)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    code = proc.wait()
    watcher.join()
    wall = time.perf_counter() - t0
    if code:
        raise SystemExit(f"infer --engine {engine} failed with exit code {code}")
    summary = json.loads((out / f"{movie.stem}.json").read_text())
    return {"engine": engine + (" compiled" if compiled else "") + (f" --amp {amp}" if amp else ""), "side": side,
            "threads": threads, "amp": summary["sizes"]["plan"].get("amp"),
            "frames": summary["frames"], "process_wall_s": wall, "wall_s": summary["wall_s"],
            "frames_per_s": summary["frames_per_s"], "cpu_s": summary["cpu_s"], "peak_rss_anon_mb": peak[0],
            "localizations": summary["localizations"], "csv": out / f"{movie.stem}.csv",
            "planned_mib": summary["sizes"]["plan"]["predicted_host_mib"]}


def compare(a: Path, b: Path, tol_nm: float = 50.0) -> tuple[float, float]:
    """(Jaccard, largest shift in nm of matched emitters) of two ThunderSTORM CSVs (nm columns)."""
    import pandas as pd
    from scipy.spatial import cKDTree

    ta, tb = pd.read_csv(a), pd.read_csv(b)
    cols = [c for c in ta.columns if c.startswith("frame")] + [c for c in ta.columns if c.startswith("x ")][:1] + \
        [c for c in ta.columns if c.startswith("y ")][:1]
    pa, pb = ta[cols].to_numpy(float), tb[cols].to_numpy(float)
    pa[:, 0] *= 1e9
    pb[:, 0] *= 1e9
    dist, _ = cKDTree(pb).query(pa, distance_upper_bound=tol_nm)
    ok = np.isfinite(dist)
    matched = int(ok.sum())
    jaccard = matched / max(1, len(pa) + len(pb) - matched)
    return jaccard, float(dist[ok].max()) if matched else float("nan")


def conversions(threads: int, env: dict, tmp: Path, model: str | None = None) -> dict:
    """Whole-process seconds of each engine's first run (a 6-frame 256² movie) with an empty cache: the runtimes'
    one-off conversion, kept in the cache for the timed runs (a 4-frame TIFF would read as one RGBA image)."""
    warm = tmp / "warm.tif"
    make_movie(warm, 6)
    seconds = {}
    for engine in engines_here():
        t = time.perf_counter()
        run_infer(warm, tmp / f"warm_{engine}", engine, threads, env, model=model)
        seconds[engine] = time.perf_counter() - t
    return seconds


def truth_jaccard(csv: Path, gt: Path, pixel_size: float) -> float:
    from decode_mem.evaluate import evaluate_files

    return evaluate_files(csv, gt, pixel_size=pixel_size).jaccard


def whole_command(side: int, frames: int, threads: int, env: dict, tmp: Path, picasso: dict | None,
                  model: str | None = None) -> list[dict]:
    """The infer command on a simulated ``side``² movie of ``frames`` frames with each engine, torch also compiled
    (its graphs saved by a warm-up run of the same size first); emitters compared with torch eager's and with the
    ground truth; tuned Picasso (``picasso``: its interpreter and settings) on the same movie."""
    from decode_mem.io.camera import Camera

    px = Camera.emccd().pixel_size  # make_movie's camera
    movie = tmp / f"movie_{side}.tif"
    gt = make_movie(movie, frames, side)
    # the warm-up movie has the timed movie's length: torch.compile's graphs are per block shape, and a 6-frame
    # warm-up left the 40-frame movie's blocks to compile in the timed run (256², bf16: 33 s, 7.0 s once warm)
    warm = tmp / f"warm_{side}.tif"
    make_movie(warm, frames, side, seed=3)
    run_infer(warm, tmp / f"warm_compiled_{side}", "torch", threads, env, side, compiled=True, model=model)
    rows = []
    runs = [("torch", False, None), ("torch", True, None), *((r, False, None) for r in engines_here()[1:])]
    if any(p == "bf16" for _, _, p in variants_here()):  # the default is bf16 here: fp32 beside it
        runs += [(e, False, "off") for e in engines_here() if e in ("torch", "openvino")]
    for engine, compiled, amp in runs:
        rows.append(run_infer(movie, tmp / f"{engine}_{compiled}_{amp}_{side}", engine, threads, env, side, compiled,
                              amp, model))
        print(f"whole command {side}² {rows[-1]['engine']}: {rows[-1]['frames_per_s']:.3g} frames/s", flush=True)
    for r in rows:
        r["jaccard"], r["max_shift_nm"] = compare(rows[0]["csv"], r["csv"])
        r["jaccard_truth"] = truth_jaccard(r["csv"], gt, px)
    for r in rows:
        del r["csv"]
    if picasso:
        from picasso_runner import run_picasso, table_from

        from decode_mem.evaluate import evaluate
        from decode_mem.io.localizations import read_localizations

        box, ng = picasso["box"], picasso["ng"]
        res = run_picasso(picasso["python"], movie, [box], ng, picasso["camera"], tmp, threaded=True)
        seconds = float(res[f"{box}_seconds"])
        table = table_from(res, box, ng)
        rows.append({"engine": f"Picasso (tuned: box {box}, min ng {ng:.0f}; threaded)", "side": side,
                     "frames": frames, "frames_per_s": frames / seconds, "wall_s": seconds,
                     "localizations": len(table), "picasso": True,
                     "jaccard_truth": evaluate(table, read_localizations(gt, pixel_size=px), pixel_size=px).jaccard})
        print(f"whole command {side}² Picasso: {frames / seconds:.3g} frames/s", flush=True)
    return rows


PHYSICS_OTHER = ("cell-like background", "PSF a third wider", "sCMOS, dim, low background", "high background")


def physics(frames: int, threads: int, python: str | None, model_path: str | None = None) -> list[dict]:
    """Every engine (and tuned Picasso) on the reference physics at 3 densities and 4 other physics."""
    import torch
    from bench_accuracy import DENSITIES, reference_simulation
    from bench_generalize import VARIANTS, simulation
    from picasso_runner import camera_settings, tuned_picasso

    from decode_mem.evaluate import evaluate
    from decode_mem.evaluate.metrics import match_emitters
    from decode_mem.infer.predict import predict_stack
    from decode_mem.io import open_stack
    from decode_mem.io.localizations import read_localizations
    from decode_mem.io.table import EmitterTable
    from decode_mem.model.checkpoint import load_model
    from decode_mem.simulate.stack import simulate_stack

    torch.set_num_threads(threads)
    model = load_model(model_path)
    cases = {f"reference, {d:g}/µm²": reference_simulation(d) for d in DENSITIES.values()}
    cases.update({name: simulation(VARIANTS[name]) for name in PHYSICS_OTHER})
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_engines_physics_") as tmp:
        work = Path(tmp)
        for i, (name, sim) in enumerate(cases.items()):
            px = sim.camera.pixel_size
            movies = {}
            for role, seed in (("test", 500 + i), ("tune", 600 + i)):
                stack, gt = work / f"p{i}_{role}.tif", work / f"p{i}_{role}.csv"
                simulate_stack(sim, frames, stack, gt, seed=seed)
                movies[role] = (stack, read_localizations(gt, pixel_size=px))
            truth = movies["test"][1]
            tables = {}
            for label, engine, precision in variants_here():  # 'torch': fp32, the reference
                with open_stack(movies["test"][0]) as s:
                    tables[label] = EmitterTable.concat(predict_stack(
                        s, model, camera=sim.camera, chunk_size=128, batch_size=4, engine=engine, threads=threads,
                        amp="bf16" if precision == "bf16" else "off"))
            row = {"name": name, "n_gt": len(truth), "engines": {}}
            for engine, table in tables.items():
                m, v = evaluate(table, truth, pixel_size=px), evaluate(table, tables["torch"], pixel_size=px,
                                                                          tolerance_lat=50.0)
                pairs = match_emitters(table, tables["torch"], pixel_size=px, tolerance_lat=50.0)
                ratio = table["photons"][pairs.pred_index] / tables["torch"]["photons"][pairs.gt_index] - 1
                row["engines"][engine] = {"jaccard": m.jaccard, "rmse_lat": m.rmse_lat, "n": len(table),
                                          "vs_torch_jaccard": v.jaccard, "vs_torch_rmse": v.rmse_lat,
                                          "vs_torch_bias": max(abs(v.bias_x), abs(v.bias_y)),
                                          "vs_torch_photons_bias": float(np.mean(ratio)) if len(ratio) else None,
                                          "vs_torch_photons_rms": float(np.sqrt(np.mean(ratio ** 2)))
                                          if len(ratio) else None}
            if python is not None:
                table, info = tuned_picasso(python, movies["tune"], movies["test"][0], camera_settings(sim.camera),
                                            px, work)
                m = evaluate(table, truth, pixel_size=px)
                row["picasso"] = {"jaccard": m.jaccard, "rmse_lat": m.rmse_lat, "box": info["box"], "ng": info["ng"]}
            rows.append(row)
            print(f"physics {name}: " + ", ".join(f"{e} J={r['jaccard']:.3f}" for e, r in row["engines"].items())
                  + (f", Picasso J={row['picasso']['jaccard']:.3f}" if "picasso" in row else ""), flush=True)
    return rows


def figure(rec: dict, path: Path) -> None:
    """Left: the network's GFLOP/s per engine against the measured sgemm peak; right: the whole command's frames/s
    per engine as a multiple of torch eager's (today's default for short movies), the goal at 2x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, peak = rec["network"], {int(k): v for k, v in rec["peak_gflops"].items()}
    keys = sorted({(r["side"], r["threads"]) for r in rows})
    names = list(dict.fromkeys(r["engine"] for r in rows))
    cmd = rec.get("whole_command", [])
    fig, axes = plt.subplots(1, 2 if cmd else 1, figsize=(12 if cmd else 7, 4.2), squeeze=False)
    ax = axes[0, 0]
    width = 0.8 / len(names)
    palette = plt.get_cmap("tab10").colors  # one colour per engine in both panels
    labels_all = list(dict.fromkeys([*names, *(r["engine"].split(" (")[0] for r in cmd)]))
    colour = {name: palette[i % len(palette)] for i, name in enumerate(labels_all)}
    for i, name in enumerate(names):
        vals = [next((r["gflops"] for r in rows if (r["side"], r["threads"]) == k and r["engine"] == name), 0)
                for k in keys]
        ax.bar(np.arange(len(keys)) + i * width, vals, width, label=name, color=colour[name])
    peak_bf16 = {int(k): v for k, v in rec.get("peak_gflops_bf16", {}).items()}
    peak_int8 = {int(k): v for k, v in (rec.get("peak_gops_int8") or {}).items() if v}
    for j, (_, t) in enumerate(keys):
        ax.hlines(peak[t], j - width / 2, j + 0.8 - width / 2, colors="k", linestyles="--",
                  label="sgemm peak (torch.mm 2048², fp32)" if j == 0 else None)
        if t in peak_bf16:
            ax.hlines(peak_bf16[t], j - width / 2, j + 0.8 - width / 2, colors="k", linestyles=":",
                      label="torch.mm 2048² peak, bf16" if j == 0 else None)
        if peak_int8.get(t):
            ax.hlines(peak_int8[t], j - width / 2, j + 0.8 - width / 2, colors="k", linestyles="-.",
                      label="OpenVINO int8 conv peak (GOP/s)" if j == 0 else None)
    ax.set_xticks(np.arange(len(keys)) + width * (len(names) - 1) / 2,
                  [f"{s}², {t} thread{'s' if t > 1 else ''}" for s, t in keys])
    ax.set_ylabel("GFLOP/s (network; int8: GOP/s)")
    # room for the legend above the peak line
    ax.set_ylim(0, max([*peak.values(), *peak_bf16.values(), *peak_int8.values()]) * 1.7)
    ax.set_title("network: the planner's unit of work")
    ax.legend(fontsize=8, loc="upper left")
    if cmd:
        ax = axes[0, 1]
        sides = sorted({r["side"] for r in cmd})
        labels = list(dict.fromkeys(r["engine"].split(" (")[0] for r in cmd))
        width = 0.8 / len(labels)
        for i, label in enumerate(labels):
            vals = []
            for side in sides:
                base = next(r for r in cmd if r["side"] == side and r["engine"] == "torch")
                row = next((r for r in cmd if r["side"] == side and r["engine"].split(" (")[0] == label), None)
                vals.append(row["frames_per_s"] / base["frames_per_s"] if row else 0)
            bars = ax.bar(np.arange(len(sides)) + i * width, vals, width, label=label, color=colour[label])
            ax.bar_label(bars, fmt="%.2f", fontsize=7)
        ax.axhline(2.0, color="k", ls="--", lw=1, label="goal: 2x torch eager")
        ax.set_yscale("log")  # Picasso is ~10x: a linear axis would flatten the engines' differences
        ax.set_xticks(np.arange(len(sides)) + width * (len(labels) - 1) / 2,
                      [f"{s}², {cmd[0]['threads']} thread{'s' if cmd[0]['threads'] > 1 else ''}" for s in sides])
        ax.set_ylabel("whole-command frames/s ÷ torch eager's (log)")
        low = min(r["frames_per_s"] / next(b for b in cmd if b["side"] == r["side"] and b["engine"] == "torch")
                  ["frames_per_s"] for r in cmd)
        ax.set_ylim(min(0.2, 0.7 * low), 100)  # every bar visible, the slowest too
        ax.set_title("whole infer command")
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ratio(cell: dict, what: str) -> str:
    """A photon-ratio cell (``vs_torch_photons_<what>``) as a signed percentage; n/a where not measured."""
    v = cell.get(f"vs_torch_photons_{what}")
    return "n/a" if v is None else f"{100 * v:+.2f} %" if what == "bias" else f"{100 * v:.2f} %"


def report(rec: dict, out: Path) -> None:
    """The markdown report (and PNG, JSON) of a measured record."""
    from report_files import write_report_files

    rows, diffs, peak = rec["network"], rec["diffs"], {int(k): v for k, v in rec["peak_gflops"].items()}
    lines = [
        "# CPU inference engines: torch eager and compiled, OpenVINO (fp32, int8), ONNX Runtime (bf16 where native)",
        "",
        f"`{rec['command']}`, started {rec['started']}, {rec['minutes']:.1f} min in all", "",
        f"Machine: {rec['machine']}. {rec['how_run']}", "",
        f"Model: {rec.get('model', DEFAULT_MODEL)}.", "",
        "## Network: the planner's unit of work (features of two frames carried)", "",
        "The unit's arithmetic (torch's `FlopCounterMode`, the same for every fp32 engine): "
        + ", ".join(f"{side}²: {next(r['gflop_unit'] for r in rows if r['side'] == side):.2f} GFLOP per unit "
                    f"({next(r['frames_unit'] for r in rows if r['side'] == side):g} frame(s))"
                    for side in sorted({r['side'] for r in rows}))
        + ". The fp32 peak is measured, not computed: the best `torch.mm` of 2048² fp32 matrices (oneDNN/MKL "
        "sgemm) on the same threads, " + ", ".join(f"{peak[t]:.0f} GFLOP/s with {t} thread(s)" for t in sorted(peak))
        + " (this VM's /proc/cpuinfo gives no clock, so no peak from clock × vector units)"
        + ("; the bf16 peak the same way with bf16 matrices: " + ", ".join(
            f"{v:.0f} GFLOP/s with {k} thread(s)" for k, v in sorted(rec["peak_gflops_bf16"].items()))
           + " (the bf16 rows' reference)" if rec.get("peak_gflops_bf16") else "")
        + ("; the int8 peak: OpenVINO's int8 3x3 convolution of 256 channels on 64² px (quantized by NNCF as the "
           "engine is), " + ", ".join(f"{v:.0f} GOP/s with {k} thread(s)" for k, v in sorted(
               rec["peak_gops_int8"].items()) if v) + " (the int8 rows' reference; part of their work stays in float, "
           "`decode_mem/model/int8.py`)" if any((rec.get("peak_gops_int8") or {}).values()) else "") + ".", "",
        "| frame | tile (tiles) | threads | engine | wall s / unit | CPU s / unit | frames/s (wall) | "
        "frames / CPU s | vs torch fp32 (CPU s) | GFLOP/s | of the peak of its precision |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        base = next(b for b in rows if (b["side"], b["threads"], b["engine"]) == (r["side"], r["threads"], "torch"))
        lines.append(f"| {r['side']}² | {r['tile']}² ({r['tiles']}) | {r['threads']} | {r['engine']} | "
                     f"{r['wall_s']:.3f} | {r['cpu_s']:.3f} | {r['frames_per_s']:.3g} | {r['frames_per_cpu_s']:.3g} | "
                     f"{base['cpu_s'] / r['cpu_s']:.2f}x | {r['gflops']:.1f} | {100 * r['peak_fraction']:.0f} % |")
    lines += ["", "Largest absolute difference from torch's fp32 output, per channel (units of the channel; bf16 "
                  "rows: bf16's rounding, an 8-bit mantissa):", "",
              "| frame | threads | engine | " + " | ".join(CHANNELS) + " |", "|---|---|---|" + "---|" * len(CHANNELS)]
    for d in diffs:
        lines.append(f"| {d['side']}² | {d['threads']} | {d['engine']} | "
                     + " | ".join(f"{v:.1e}" for v in d["max_abs"]) + " |")
    cmd = rec.get("whole_command", [])
    if cmd:
        lines += ["", f"## Whole command: `python -m decode_mem.infer`, {cmd[0]['threads']} threads", "",
                  "Simulated movies (1 emitter/µm², the default EMCCD), sizes fixed as the planner picks them here "
                  "(256²: `--chunk_size 256 --batch_size 4`; 2048²: `--chunk_size 512 --batch_size 1`). "
                  "Every run with the default `--amp auto` unless its name says `--amp off`: "
                  + ", ".join(sorted({f"{r['amp']}" for r in cmd if r.get("amp") and "--amp" not in r["engine"]}))
                  + " here (the planner's amp of the default runs; 'bf16' on a CPU with native bf16, where OpenVINO "
                  "computes in bf16 too and ONNX Runtime stays fp32). "
                  "torch eager is today's default for short movies, torch compiled (`--compile on`, its graphs "
                  "saved by a warm-up run of a movie of the same size and length) for movies from 120 M px of work. "
                  "Conversion (whole process of a first 6-frame 256² run with an empty cache): "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in rec["conversion"].items()) + ", once per machine "
                  "and checkpoint. Picasso: box and threshold tuned for Jaccard on another 256² movie of the same "
                  "physics, identify + LQ fit multi-threaded, its identify + fit seconds only.", "",
                  "| frame | engine | frames | frames/s | vs torch eager | vs torch compiled | CPU s | "
                  "peak RssAnon MiB (peak / plan) | localizations | Jaccard vs truth | Jaccard vs torch | "
                  "largest shift nm |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in cmd:
            eager = next(b for b in cmd if b["side"] == r["side"] and b["engine"] == "torch")
            comp = next(b for b in cmd if b["side"] == r["side"] and b["engine"] == "torch compiled")
            if r.get("picasso"):
                lines.append(f"| {r['side']}² | {r['engine']} | {r['frames']} | {r['frames_per_s']:.3g} | "
                             f"{r['frames_per_s'] / eager['frames_per_s']:.2f}x | "
                             f"{r['frames_per_s'] / comp['frames_per_s']:.2f}x | n/a | n/a | {r['localizations']} | "
                             f"{r['jaccard_truth']:.3f} | n/a | n/a |")
                continue
            lines.append(f"| {r['side']}² | {r['engine']} | {r['frames']} | {r['frames_per_s']:.3g} | "
                         f"{r['frames_per_s'] / eager['frames_per_s']:.2f}x | "
                         f"{r['frames_per_s'] / comp['frames_per_s']:.2f}x | {r['cpu_s']:.1f} | "
                         f"{r['peak_rss_anon_mb']:.0f} ({r['peak_rss_anon_mb'] / r['planned_mib']:.2f}) | "
                         f"{r['localizations']} | {r['jaccard_truth']:.3f} | {r['jaccard']:.4f} | "
                         f"{r['max_shift_nm']:.1e} |")
        fastest: dict[int, tuple[float, str]] = {}
        for r in cmd:
            if not r.get("picasso") and not r["engine"].startswith("torch") and "--amp" not in r["engine"]:
                eager = next(b for b in cmd if b["side"] == r["side"] and b["engine"] == "torch")
                fastest[r["side"]] = max(fastest.get(r["side"], (0.0, "")),
                                         (r["frames_per_s"] / eager["frames_per_s"], r["engine"]))
        lines += ["", "Goal (whole-command frames/s ≥ 2x today's default at both sizes): "
                  + ", ".join(f"{side}²: best runtime {e} {v:.2f}x torch eager ({'met' if v >= 2 else 'not met'})"
                              for side, (v, e) in sorted(fastest.items())) + "."]
    phys = rec.get("physics", [])
    if phys:
        names = list(phys[0]["engines"])
        lines += ["", f"## Accuracy on simulated physics ({rec['physics_frames']} frames each, "
                  f"{rec['physics_threads']} thread(s))", "",
                  "Each movie localized by every engine (`predict_stack`, the movie's camera); against the ground "
                  "truth (250 nm) and against torch's output (50 nm). Reference physics: `bench_accuracy`'s (the "
                  "shipped model's own envelope); the others: `bench_generalize`'s (physics it was not trained on). "
                  "Picasso tuned on a second movie of the same physics.", "",
                  "| physics | GT | " + " | ".join(f"{e}: Jaccard / RMSE nm" for e in names)
                  + " | " + " | ".join(f"{e} vs torch: Jaccard / RMSE nm / largest mean shift nm / photons: mean "
                                       "and RMS of the ratio − 1" for e in names[1:])
                  + " | Picasso: Jaccard / RMSE nm |",
                  "|---|---|" + "---|" * (2 * len(names) - 1) + "---|"]
        for row in phys:
            e = row["engines"]
            pic = row.get("picasso")
            pic_cell = f"{pic['jaccard']:.3f} / {pic['rmse_lat']:.1f}" if pic else "n/a"
            lines.append(f"| {row['name']} | {row['n_gt']} | "
                         + " | ".join(f"{e[n]['jaccard']:.4f} / {e[n]['rmse_lat']:.2f}" for n in names) + " | "
                         + " | ".join(f"{e[n]['vs_torch_jaccard']:.4f} / {e[n]['vs_torch_rmse']:.1e} / "
                                      f"{e[n]['vs_torch_bias']:.1e} / {_ratio(e[n], 'bias')} / {_ratio(e[n], 'rms')}"
                                      for n in names[1:])
                         + f" | {pic_cell} |")
        from decode_mem.infer.int8_check import TOLERANCE  # the one tolerance: 'auto' checks int8 against it

        def worst(n: str) -> dict[str, float]:
            """The numbers of ``TOLERANCE.failures`` for engine ``n``: its worst over the physics."""
            e = [(r["engines"][n], r["engines"]["torch"]) for r in phys]
            return {"jaccard_loss": max(ref["jaccard"] - mine["jaccard"] for mine, ref in e),
                    "rmse_change_nm": max(mine["rmse_lat"] - ref["rmse_lat"] for mine, ref in e),
                    "shift_nm": max(mine["vs_torch_bias"] for mine, _ in e),
                    "photons_bias": max(abs(mine.get("vs_torch_photons_bias") or 0.0) for mine, _ in e)}

        def held(failures: list[str]) -> str:
            return "not held: " + "; ".join(failures) if failures else "held"

        t = TOLERANCE
        lines += ["", "Tolerance (`decode_mem.infer.int8_check.TOLERANCE`, the one `--engine auto` checks int8 "
                  f"against: Jaccard at most {t.jaccard} below fp32 torch's, RMSE at most {t.rmse_nm} nm above, "
                  f"mean shift < {t.shift_nm:g} nm, photons within {t.photons:.0%} on average; 'torch' is fp32 here, "
                  "'torch bf16' today's default on a CPU with native bf16): "
                  + "; ".join(f"{n}: largest Jaccard loss {w['jaccard_loss']:.4f}, largest RMSE increase "
                              f"{w['rmse_change_nm']:.3f} nm, mean shift {w['shift_nm']:.1e} nm, photon bias "
                              f"{w['photons_bias']:.1%} ({held(t.failures(w))})"
                              for n, w in ((n, worst(n)) for n in names[1:])) + "."]
    lines += ["", "## Not measured here", "",
              *([] if rec.get("peak_gflops_bf16") else [
                  "- bf16 (torch or runtimes): this CPU has no native bf16 (no AVX-512 BF16 / AMX); emulated bf16 is "
                  "slower than fp32 (`benchmarks/results/throughput.md`)."]),
              "- ONNX Runtime in bf16 or int8: not tried (decode_mem runs its CPU provider in fp32).",
              *([] if any(r["engine"].startswith("openvino-int8") for r in rows) else [
                  "- int8 (`--engine openvino-int8`): not installed here (`nncf`, the `cpu` extra)."])]
    if not cmd:
        lines.append("- The whole command: not run (`--frames 0`).")
    if not phys:
        lines.append("- Accuracy on simulated physics: not run (`--physics-frames 0`).")
    if rec.get("notes"):
        lines += ["", "## Earlier measurements (not from this run; as noted at the time)", "", "```",
                  rec["notes"].rstrip(), "```"]
    write_report_files(out, lines, lambda png: figure(rec, png), rec)


def main() -> None:
    from report_files import add_render_option

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2", help="thread counts of the network part")
    ap.add_argument("--sizes", default="256,2048")
    ap.add_argument("--frames", type=int, default=200,
                    help="frames of the 256² whole-command movie (0: skip; 40 frames ran 3 s, where OpenVINO's "
                         "first calls of each block shape made the rate vary from 10 to 16 frames/s)")
    ap.add_argument("--frames-2048", type=int, default=8, help="frames of the 2048² whole-command movie (0: skip)")
    ap.add_argument("--cmd-threads", type=int, default=os.cpu_count(), help="threads of the whole command")
    ap.add_argument("--physics-frames", type=int, default=200, help="frames of each physics movie (0: skip)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--picasso-python", help="interpreter with picassosr (see picasso_runner.py)")
    ap.add_argument("--notes", help="a text file of earlier measurements to add, marked as not from this run")
    ap.add_argument("--model", help="the checkpoint (default: the shipped small model, infer's CPU default)")
    ap.add_argument("--out", default=str(RESULTS / "cpu_engines.md"))
    add_render_option(ap, "cpu_engines")
    args = ap.parse_args()
    out = Path(args.out)
    if args.render is not None:
        report(json.loads(args.render.read_text()), out)
        print(f"wrote {out}")
        return
    from picasso_runner import camera_settings, find_picasso_python, picasso_version

    at, load0, t_all = commit(), load_average(), time.perf_counter()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    python = find_picasso_python(args.picasso_python)
    threads = [int(t) for t in args.threads.split(",")]
    rows, diffs, peak, peak_bf16, peak_int8 = network([int(s) for s in args.sizes.split(",")], threads,
                                                      args.repeats, args.model)
    rec = {"command": command_line(), "started": started, "network": rows, "diffs": diffs, "peak_gflops": peak,
           "peak_gflops_bf16": peak_bf16, "peak_gops_int8": peak_int8,
           "physics_frames": args.physics_frames, "physics_threads": args.cmd_threads,
           "notes": Path(args.notes).read_text() if args.notes else None,
           "model": args.model or DEFAULT_MODEL}
    if args.frames or args.frames_2048:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            env = {**os.environ, "DECODE_MEM_CACHE": str(tmp / "cache" / "throughput.json")}
            rec["conversion"] = conversions(args.cmd_threads, env, tmp, args.model)
            picasso = None
            if python is not None:
                from bench_throughput import tune_picasso_settings

                from decode_mem.io.camera import Camera
                from decode_mem.simulate.config import SimulationConfig

                tuning = tune_picasso_settings(python, SimulationConfig(frame_size=(256, 256), density=1.0,
                                                                        margin=6.0), 40, tmp)
                picasso = {"python": python, "box": tuning["box"], "ng": tuning["ng"],
                           "camera": camera_settings(Camera.emccd())}
            rec["whole_command"] = []
            for side, frames in ((256, args.frames), (2048, args.frames_2048)):
                if frames:
                    rec["whole_command"] += whole_command(side, max(frames, 6 if side == 256 else 5),
                                                          args.cmd_threads, env, tmp, picasso, args.model)
    if args.physics_frames:
        rec["physics"] = physics(args.physics_frames, args.cmd_threads, python, args.model)
    extra = f"; {picasso_version(python)}" if python else "; Picasso: not installed"
    rec["machine"] = machine_line("the threads of each row", load_start=load0, at=at) + extra
    rec["how_run"] = ("The author runs it from a frozen worktree at `nice -n -10`, with no other job (the "
                      "background training paused); a load average at the start can still count a job that ended "
                      "in the minute before.")
    rec["minutes"] = (time.perf_counter() - t_all) / 60
    report(rec, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
