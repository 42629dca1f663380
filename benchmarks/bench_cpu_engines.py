"""CPU inference engines: torch eager against OpenVINO and ONNX Runtime (fp32) on the same cores.

    python benchmarks/bench_cpu_engines.py [--threads 1,2] [--sizes 256,2048] [--frames 40] [--int8] [--notes FILE]
                                           # benchmarks/results/cpu_engines.md + .png

1. **Network**: the planner's unit of work (``TiledExecutor.unit``, a block's steady state: ``batch`` new frames,
   two frames' features carried) of the shipped model on Poisson frames, 256² (chunk 256, batch 4: one tile) and
   2048² (chunk 512, batch 1: 16 tiles of 608²), per engine and thread count; the engines take turns, each
   ``--repeats`` times, and the least time is kept (wall and this process's CPU seconds: on a loaded machine the
   CPU seconds are the steadier). Frames/s are those of whole frames. Beside it the largest difference of each
   runtime's output from torch's, per output channel.
2. **Whole command** (``python -m decode_mem.infer`` with ``--threads 1``, fixed sizes, the converted network
   already cached, so the runs compare steady work, not the one-off conversion, whose cost is given apart): on a
   256² movie of ``--frames`` frames (the sample stack tiled 4x4): frames/s, CPU seconds, peak RssAnon (sampled
   from /proc every 20 ms) and the emitters against torch's (Jaccard and the largest shift of matched emitters,
   matched within 50 nm in the same frame).

3. ``--int8`` (needs ``nncf``): an experiment, not an engine: OpenVINO int8 by NNCF post-training quantization,
   calibrated on simulated windows of the model's envelope with the heads, their output convs and the first and
   last conv of each U-Net in fp32; its CPU time against OpenVINO fp32 and its output against fp32.

Not measured here (the issue's full table): bf16 (this CPU has no native bf16), int8 engines, 2048² whole-command,
accuracy on simulated physics against ground truth, Picasso, GFLOP/s against the machine's peak. The report
says what was not measured and the machine's load; ``--notes`` adds a file of earlier measurements, marked so.
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
SIZES = {256: (256, 4), 2048: (512, 1)}  # frame side -> (chunk, batch): what the planner picks here (plan --no_probe)
CHANNELS = ("p_logit", "photons", "dx", "dy", "z", "sigma_photons", "sigma_x", "sigma_y", "sigma_z", "bg")


def engines_here() -> list[str]:
    from decode_mem.model.engine import RUNTIMES, installed

    return ["torch", *[r for r in RUNTIMES if installed(r)]]


def network(sides: list[int], threads: list[int], repeats: int) -> tuple[list[dict], list[dict]]:
    """Rows of unit timings and of output differences from torch."""
    import torch

    from decode_mem.model.checkpoint import load_model
    from decode_mem.model.engine import load_engine
    from decode_mem.postprocess import MARGIN
    from decode_mem.tiling import TiledExecutor
    from decode_mem.tiling.config import TileConfig

    net = load_model().net.eval().to(memory_format=torch.channels_last)
    rows, diffs = [], []
    cache = Path(tempfile.mkdtemp(prefix="bench_engines_"))
    for n in threads:
        torch.set_num_threads(n)
        engines = {name: load_engine(name, net, n, cache) for name in engines_here()}
        for side in sides:
            chunk, batch = SIZES[side]
            units, outs = {}, {}
            for name, eng in engines.items():
                ex = TiledExecutor(net, (side, side), TileConfig(chunk_size=chunk, batch_size=batch, margin=MARGIN),
                                   engine=eng)
                group = ex._group(batch)
                gen = torch.Generator().manual_seed(0)
                data = torch.poisson(torch.full((group, batch + 2, *ex.grid.tile_shape), 20.0), generator=gen)
                units[name] = (ex.unit(batch, data=data, carried=True), batch * group / len(ex.grid), ex)
                outs[name] = units[name][0]()  # warm-up, and the output compared
            wall = {k: [] for k in units}
            cpu = {k: [] for k in units}
            for _ in range(repeats):  # the engines take turns: a change in the machine's load hits all of them
                for name, (unit, _, _) in units.items():
                    t, c = time.perf_counter(), time.process_time()
                    unit()
                    wall[name].append(time.perf_counter() - t)
                    cpu[name].append(time.process_time() - c)
            for name, (_, frames, ex) in units.items():
                rows.append({"side": side, "threads": n, "engine": name, "tile": ex.grid.tile_shape[0],
                             "tiles": len(ex.grid), "wall_s": min(wall[name]), "cpu_s": min(cpu[name]),
                             "frames_per_s": frames / min(wall[name]), "frames_per_cpu_s": frames / min(cpu[name])})
                if name != "torch":
                    d = (outs[name] - outs["torch"]).abs().amax(dim=(0, 1, 3, 4))
                    diffs.append({"side": side, "threads": n, "engine": name, "max_abs": [float(v) for v in d]})
            print(f"network {side}² {n} thread(s): " + ", ".join(
                f"{r['engine']} {r['frames_per_s']:.3g} fr/s" for r in rows[-len(units):]), flush=True)
    return rows, diffs


INT8_KEPT = [".*heads.*", "^aten::.*", r".*encoders\.0\.0/.*", r".*\.out\.0/.*"]  # fp32: heads, their fp32
# output convs, the first and last conv of each U-Net (the variant that held positions best in the exploration)


def int8(calibration: int = 64, test: int = 32) -> dict:
    """OpenVINO int8 (NNCF post-training quantization, ``INT8_KEPT`` in fp32) calibrated on simulated windows of
    the shipped model's envelope (64², another seed for the test): CPU seconds of both sub-networks at 256² against
    OpenVINO fp32, and the int8 output against fp32 on the test windows where fp32 has p > 0.4."""
    import dataclasses
    import warnings

    import nncf
    import openvino as ov
    import torch

    from decode_mem.model.checkpoint import load_model
    from decode_mem.model.engine import OpenVINOEngine
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.dataset import simulate_windows

    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    model = load_model()
    net = model.net.eval()
    sim = dataclasses.replace(SimulationConfig.from_dict(model.simulation), frame_size=(64, 64))

    def windows(n: int, seed: int) -> torch.Tensor:
        wb = simulate_windows(sim, n, torch.Generator().manual_seed(seed))
        return net.normalize(wb.frames, net.frame_level(wb.frames), wb.read_var[:, None])  # (n, 3, C, H, W)

    cache = Path(tempfile.mkdtemp(prefix="bench_int8_"))
    fp32 = OpenVINOEngine(net, 1, cache)
    folder = next(cache.glob("openvino-*"))
    core = ov.Core()
    cal = windows(calibration, 1)
    feats = [net.frame_features(w) for w in cal]
    scope = nncf.IgnoredScope(patterns=INT8_KEPT, validate=False)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q_ff = nncf.quantize(core.read_model(str(folder / "frame_features.xml")),
                             nncf.Dataset([w.numpy() for w in cal]), subset_size=calibration, ignored_scope=scope)
        q_tp = nncf.quantize(core.read_model(str(folder / "temporal.xml")),
                             nncf.Dataset([{i: f[i:i + 1].numpy() for i in range(3)} for f in feats]),
                             subset_size=calibration, ignored_scope=scope)
    quantize_s = time.perf_counter() - t0
    config = {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32", "NUM_STREAMS": 1}
    k_ff, k_tp = core.compile_model(q_ff, "CPU", config), core.compile_model(q_tp, "CPU", config)
    x = windows(test, 2)
    n, _, c, h, w = x.shape
    with torch.no_grad():
        f = net.frame_features(x.reshape(-1, c, h, w)).view(n, 3, -1, h, w)
        ref = net.temporal(f[:, 0], f[:, 1], f[:, 2]).numpy()
    q = torch.from_numpy(k_ff({0: x.reshape(-1, c, h, w).numpy()})[0]).view(n, 3, -1, h, w)
    got = k_tp({i: q[:, i].contiguous().numpy() for i in range(3)})[0]
    p_ref, p_got = (1 / (1 + np.exp(-a[:, 0])) for a in (ref, got))
    det, det8 = p_ref > 0.4, p_got > 0.4
    px = float(model.camera.pixel_size)
    acc = {"pixels_fp32": int(det.sum()), "pixels_int8": int(det8.sum()), "pixels_both": int((det & det8).sum())}
    for ch, name, scale in ((2, "dx_nm", px), (3, "dy_nm", px), (1, "photons", 1.0)):
        d = (got[:, ch] - ref[:, ch])[det] * scale
        acc[name] = {"mean_abs": float(np.abs(d).mean()), "max_abs": float(np.abs(d).max()), "bias": float(d.mean())}
    photons = ref[:, 1][det]
    acc["photons_fp32_median"] = float(np.median(photons))
    xs = torch.poisson(torch.full((6, 256, 256), 20.0), generator=torch.Generator().manual_seed(0))
    xn = net.normalize(xs, net.frame_level(xs)).contiguous()
    with torch.no_grad():
        fs = net.frame_features(xn)
    wn = {j: fs[j:j + 4].contiguous().numpy() for j in range(3)}
    calls = {"frame_features fp32": lambda: fp32._ff({0: xn.numpy()}),
             "frame_features int8": lambda: k_ff({0: xn.numpy()}),
             "temporal fp32": lambda: fp32._tp(wn), "temporal int8": lambda: k_tp(wn)}
    for call in calls.values():
        call()
    cpu = {k: [] for k in calls}
    for _ in range(3):
        for k, call in calls.items():
            t = time.process_time()
            call()
            cpu[k].append(time.process_time() - t)
    print(f"int8: quantized in {quantize_s:.0f} s; {acc}", flush=True)
    return {"quantize_s": quantize_s, "accuracy": acc, "cpu_s": {k: min(v) for k, v in cpu.items()},
            "calibration": calibration, "test": test}


def make_movie(path: Path, frames: int) -> None:
    import tifffile

    sample = tifffile.imread(ROOT / "data" / "sample" / "stack.tif")
    reps = -(-frames // len(sample))
    movie = np.tile(np.concatenate([sample] * reps)[:frames], (1, 4, 4))
    tifffile.imwrite(path, movie)


def rss_anon_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_infer(movie: Path, out: Path, engine: str, threads: int, env: dict) -> dict:
    cmd = [sys.executable, "-m", "decode_mem.infer", str(movie), "--out", str(out), "--quiet", "--engine", engine,
           "--threads", str(threads), "--use_chunking", "--chunk_size", "256", "--batch_size", "4",
           "--format", "csv"]
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
    return {"engine": engine, "threads": threads, "process_wall_s": wall, "wall_s": summary["wall_s"],
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


def whole_command(frames: int, threads: int) -> tuple[list[dict], dict]:
    rows = []
    conversion = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        env = {**os.environ, "DECODE_MEM_CACHE": str(tmp / "cache" / "throughput.json")}
        movie = tmp / "movie.tif"
        make_movie(movie, frames)
        warm = tmp / "warm.tif"
        make_movie(warm, 6)  # 6 frames: a 4-frame TIFF reads as one RGBA image
        for engine in engines_here():  # the conversion, once per machine and checkpoint: timed apart
            t = time.perf_counter()
            run_infer(warm, tmp / f"warm_{engine}", engine, threads, env)
            conversion[engine] = time.perf_counter() - t
        for engine in engines_here():
            rows.append(run_infer(movie, tmp / engine, engine, threads, env))
            print(f"whole command {engine}: {rows[-1]['frames_per_s']:.2f} frames/s", flush=True)
        for r in rows:
            r["jaccard"], r["max_shift_nm"] = compare(rows[0]["csv"], r["csv"])
        for r in rows:
            del r["csv"]
    return rows, conversion


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({(r["side"], r["threads"]) for r in rows})
    names = list(dict.fromkeys(r["engine"] for r in rows))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        vals = [next((r["frames_per_cpu_s"] for r in rows if (r["side"], r["threads"]) == k and r["engine"] == name),
                     0) for k in keys]
        ax.bar(np.arange(len(keys)) + i * width, vals, width, label=name)
    ax.set_xticks(np.arange(len(keys)) + width * (len(names) - 1) / 2,
                  [f"{s}², {t} thread{'s' if t > 1 else ''}" for s, t in keys])
    ax.set_ylabel("frames per CPU second (network)")
    ax.set_title("network unit of work per engine (fp32)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--sizes", default="256,2048")
    ap.add_argument("--frames", type=int, default=40, help="frames of the 256² whole-command movie (0: skip)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--int8", action="store_true", help="also the OpenVINO int8 experiment (needs nncf)")
    ap.add_argument("--notes", help="a text file of earlier measurements to add, marked as not from this run")
    ap.add_argument("--out", default=str(RESULTS / "cpu_engines.md"))
    args = ap.parse_args()
    at, load0, started = commit(), load_average(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    threads = [int(t) for t in args.threads.split(",")]
    rows, diffs = network([int(s) for s in args.sizes.split(",")], threads, args.repeats)
    load_mid = load_average()
    cmd_rows, conversion = whole_command(max(args.frames, 6), 1) if args.frames else ([], {})
    q = int8() if args.int8 else None
    out = Path(args.out)
    figure(rows, out.with_suffix(".png"))
    lines = [
        "# CPU inference engines (fp32): torch eager, OpenVINO, ONNX Runtime", "",
        f"`{command_line()}`, started {started}", "",
        f"Machine: {machine_line('the threads of each row', load_start=load0, at=at)}; 1-min load average after "
        f"the network part {load_mid:.2f}. Every process ran as started (the author's runs: `nice -n 19`), on a "
        "machine shared with other work: wall times are slowed by the load, CPU seconds much less.", "",
        "## Network: the planner's unit of work (features of two frames carried)", "",
        "| frame | tile (tiles) | threads | engine | wall s / unit | CPU s / unit | frames/s (wall) | "
        "frames / CPU s | vs torch (CPU s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        base = next(b for b in rows if (b["side"], b["threads"], b["engine"]) == (r["side"], r["threads"], "torch"))
        lines.append(f"| {r['side']}² | {r['tile']}² ({r['tiles']}) | {r['threads']} | {r['engine']} | "
                     f"{r['wall_s']:.3f} | {r['cpu_s']:.3f} | {r['frames_per_s']:.3g} | {r['frames_per_cpu_s']:.3g} | "
                     f"{base['cpu_s'] / r['cpu_s']:.2f}x |")
    lines += ["", f"![network frames per CPU second]({out.with_suffix('.png').name})", "",
              "Largest absolute difference from torch's fp32 output, per channel (units of the channel):", "",
              "| frame | threads | engine | " + " | ".join(CHANNELS) + " |", "|---|---|---|" + "---|" * len(CHANNELS)]
    for d in diffs:
        lines.append(f"| {d['side']}² | {d['threads']} | {d['engine']} | "
                     + " | ".join(f"{v:.1e}" for v in d["max_abs"]) + " |")
    if cmd_rows:
        lines += ["", f"## Whole command: `python -m decode_mem.infer`, 256², {args.frames} frames, 1 thread", "",
                  "Fixed sizes (`--use_chunking --chunk_size 256 --batch_size 4`), the converted network already "
                  "in the cache. Conversion (first run of a 6-frame movie with an empty cache, whole process): "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in conversion.items()) + ".", "",
                  "| engine | frames/s | run wall s | process wall s | CPU s | vs torch (CPU s) | peak RssAnon MiB | "
                  "planned MiB (peak / plan) | localizations | Jaccard vs torch | largest shift nm |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in cmd_rows:
            lines.append(f"| {r['engine']} | {r['frames_per_s']:.2f} | {r['wall_s']:.1f} | {r['process_wall_s']:.1f} | "
                         f"{r['cpu_s']:.2f} | {cmd_rows[0]['cpu_s'] / r['cpu_s']:.2f}x | {r['peak_rss_anon_mb']:.0f} | "
                         f"{r['planned_mib']:.0f} ({r['peak_rss_anon_mb'] / r['planned_mib']:.2f}) | "
                         f"{r['localizations']} | {r['jaccard']:.4f} | {r['max_shift_nm']:.1e} |")
    if q:
        a = q["accuracy"]
        lines += ["", "## int8 (OpenVINO + NNCF post-training quantization): an experiment, not shipped", "",
                  f"Calibrated on {q['calibration']} simulated 64² windows of the shipped model's envelope "
                  f"({q['quantize_s']:.0f} s), kept in fp32: `{'`, `'.join(INT8_KEPT)}` (the heads, their fp32 output "
                  f"convs, the first and last conv of each U-Net). Tested on {q['test']} other windows against fp32 "
                  f"where fp32 has p > 0.4 ({a['pixels_fp32']} px; int8 {a['pixels_int8']}, both {a['pixels_both']}).",
                  "", "| quantity | mean abs difference | largest | mean (bias) |", "|---|---|---|---|"]
        for name in ("dx_nm", "dy_nm", "photons"):
            d = a[name]
            lines.append(f"| {name.replace('_nm', ' (nm)')} | {d['mean_abs']:.3g} | {d['max_abs']:.3g} | "
                         f"{d['bias']:.3g} |")
        lines += ["", f"(median fp32 photons there: {a['photons_fp32_median']:.0f}.) CPU s at 256², 1 thread (6 "
                  "frames / 4 windows): " + ", ".join(f"{k} {v:.3f}" for k, v in q["cpu_s"].items()) + "."]
    lines += ["", "## Not measured here", "",
              "- bf16 (torch or runtimes): this CPU has no native bf16 (no AVX-512 BF16 / AMX); emulated bf16 is "
              "slower than fp32 (`benchmarks/results/throughput.md`).",
              "- int8 in the engines and the whole command: not built (the experiment above, where run, and the "
              "notes say why).",
              "- The whole command at 2048², accuracy against ground truth on simulated physics (3 densities, 4 other "
              "physics), tuned Picasso, GFLOP/s against the machine's peak: not run (time, and a loaded machine).",
              "- The issue's goal (whole-command frames/s >= 2x today's default at 256² and 2048²) needs a quiet "
              "machine; the CPU-second ratios above are the closest this run gives."]
    if args.notes:
        lines += ["", "## Earlier measurements this session (not from this run; as noted at the time)", "", "```",
                  Path(args.notes).read_text().rstrip(), "```"]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
