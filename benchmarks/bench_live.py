"""Lag of ``infer --follow`` behind a camera writing 256 x 256 frames at 10, 100 and 400 frames/s.

    python benchmarks/bench_live.py                      # 3 rates, 10 s of camera each (at most 200 frames)
    python benchmarks/bench_live.py --rates 50 --seconds 3 --out /tmp/live.md     # smoke run

A simulated 256² EMCCD movie (``simulate_stack``, density 1/µm², 200 frames) is written page
by page into a growing TIFF by the tests' camera stand-in (``tests/inference/live_writer.py``: each page linked,
then its IFD and pixels): ``WARM_FRAMES`` at once, then, once the run reports its first block, at the set rate,
while ``python -m decode_mem.infer MOVIE --follow`` (shipped model,
default sizes, CSV, ``--refresh 1``, ``--idle_timeout 20``) runs in another process. Every 0.5 s this script reads
the run's ``<stem>.json`` (to start the camera once the run is going) and the run's RssAnon
(``/proc/<pid>/status``); the lag (frames and seconds behind the camera, after every block) is the run's own,
from its final ``<stem>.json``. Reported per rate: the largest lag while the camera wrote and after, how long the run
needed after the camera's last frame to catch up, the frames/s localized, whether the run said it is
slower than the camera, and RssAnon at the first sample, at its peak and at the end. GPU rows: not measured
unless this runs on a GPU. Writes benchmarks/results/live.md and live.png.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from command_line import command_line
from machine import load_average, machine_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
WRITER = ROOT / "tests" / "inference" / "live_writer.py"
SIDE = 256
IDLE_S = 20.0  # longer than the run needs for its first block while the camera holds after WARM_FRAMES
SAMPLE_S = 0.5
WARM_FRAMES = 24  # written at once before the timed phase: the run plans its sizes and does its first block


def simulate(folder: Path) -> np.ndarray:
    import tifffile
    import torch

    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.stack import simulate_stack

    torch.set_num_threads(1)
    simulate_stack(SimulationConfig(frame_size=(SIDE, SIDE), density=1.0), 200, folder / "sim.tif", seed=0)
    return tifffile.imread(folder / "sim.tif")


def rss_anon_mb(pid: int) -> float | None:
    from decode_mem.memory import read_host_memory

    return read_host_memory(pid)["rss_anon_mb"]


def one_rate(rate: float, movie: np.ndarray, folder: Path, threads: int, device: str) -> dict:
    work = folder / f"rate{rate:g}"
    work.mkdir()
    np.save(work / "frames.npy", movie)
    target, out = work / "movie.tif", work / "out"
    go = work / "go"
    writer = subprocess.Popen([sys.executable, str(WRITER), "tiff", str(work / "frames.npy"), str(target),
                               "--rate", str(rate), "--hold_at", str(WARM_FRAMES), "--hold_file", str(go)])
    while not target.exists():
        time.sleep(0.01)
    cmd = [sys.executable, "-m", "decode_mem.infer", str(target), "--out", str(out), "--follow", "--idle_timeout",
           str(IDLE_S), "--refresh", "1", "--format", "csv", "--threads", str(threads), "--quiet", "--device", device]
    t0, wall0 = time.monotonic(), time.time()
    run = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    samples: list[dict] = []
    writer_end = camera_start = None
    while run.poll() is None:
        time.sleep(SAMPLE_S)
        now = time.monotonic() - t0
        if writer_end is None and writer.poll() is not None:
            writer_end = now
        sample = {"t": now, "rss_anon_mb": rss_anon_mb(run.pid),
                  "writing": camera_start is not None and writer_end is None}
        try:
            state = json.loads((out / "movie.json").read_text())
        except (OSError, ValueError):
            state = {}
        if camera_start is None and state.get("status") == "running":  # the run is going: the camera starts
            go.touch()
            camera_start = now
        samples.append(sample)
    stderr = run.stderr.read()
    end = time.monotonic() - t0
    if run.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{stderr[-3000:]}")
    writer.wait()
    writer_end = end if writer_end is None else writer_end
    final = json.loads((out / "movie.json").read_text())
    live = final["live"]
    offset = live["started_at"] - wall0  # the run's clock on this script's
    timeline = [(offset + t, behind, secs, done) for t, done, behind, secs in live["lag_timeline"]["rows"]]
    after = [x for x in timeline if x[0] > writer_end][:1]  # the first block done after the camera's last frame
    during = [x for x in timeline if camera_start is not None and camera_start <= x[0] <= writer_end] + after
    rss = [s["rss_anon_mb"] for s in samples if s["rss_anon_mb"] is not None and camera_start is not None
           and s["t"] >= camera_start]
    # the device's own pace: frames done per second between the camera's start and the last block before the
    # final one (which waits for the idle timeout), while frames were waiting
    busy = [x for x in timeline if camera_start is not None and x[0] >= camera_start][:-1]
    pace = (busy[-1][3] - busy[0][3]) / (busy[-1][0] - busy[0][0]) if len(busy) > 1 and busy[-1][0] > busy[0][0] \
        else None
    return {"rate": rate, "frames": len(movie), "camera_s": (len(movie) - WARM_FRAMES) / rate,
            "camera_start_s": camera_start, "writer_end_s": writer_end,
            "end_s": end,
            "after_camera_s": max(0.0, busy[-1][0] - writer_end) if busy else None,
            "localized_frames": final["frames"],
            "frames_per_s": pace, "localizations": final["localizations"],
            "max_behind_writing": max((x[1] for x in during), default=None),
            "max_seconds_writing": max((x[2] for x in during), default=None), "timeline": timeline,
            "max_behind": final["live"]["max_frames_behind"], "max_seconds": final["live"]["max_seconds_behind"],
            "slower_warning": "no frame is dropped" in stderr, "rss_first": rss[0] if rss else None,
            "rss_peak": max(rss, default=None), "rss_last": rss[-1] if rss else None,
            "peak_rss_json": final.get("peak_rss_anon_mb"), "block": final["live"]["block"],
            "samples": samples}


def plot(rows: list[dict], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 6), layout="constrained")
    FigureCanvasAgg(fig)
    lag, mem = fig.subplots(2, 1, sharex=True)
    for r in rows:
        line, = lag.plot([x[0] for x in r["timeline"]], [x[1] for x in r["timeline"]], label=f"{r['rate']:g} frames/s")
        for when in (r["camera_start_s"], r["writer_end_s"]):
            lag.axvline(when, color=line.get_color(), linestyle=":", linewidth=1)
        m = [x for x in r["samples"] if x["rss_anon_mb"] is not None]
        mem.plot([x["t"] for x in m], [x["rss_anon_mb"] for x in m], color=line.get_color())
    lag.set_ylabel("frames behind the camera")
    lag.legend(title="camera (dotted: its first and last timed frame)")
    mem.set_ylabel("RssAnon of the run (MiB)")
    mem.set_xlabel("seconds since the run started")
    fig.savefig(path, dpi=100)


def report(rows: list[dict], cmd: str, machine: str, out: Path) -> str:
    def num(v: float | None, fmt: str = "{:.0f}") -> str:
        return "n/a" if v is None else fmt.format(v)

    lines = ["# Live inference: lag behind a camera (`infer --follow`)", "", f"Command: `{cmd}`", "",
             f"Machine: {machine}.", "",
             f"Camera: 256 x 256 uint16 frames (simulated EMCCD, density 1/µm²) written page by page into a growing "
             f"TIFF by `tests/inference/live_writer.py`: {WARM_FRAMES} frames at once, then, once the run has done "
             f"its first block (planning, model load), the timed camera phase at the set rate; the run: the "
             f"shipped model, default sizes "
             f"('auto' block with --follow: {rows[0]['block']} frames), CSV, `--refresh 1 --idle_timeout "
             f"{IDLE_S:g}`. Lag: the run's own, after every block (the `lag_timeline` of its final `movie.json`); "
             "'while writing': from the camera's first timed frame to the first block done after its last; "
             "RssAnon of the run from /proc, from the camera's start on (the run has loaded the model and done a "
             "block). 'localized frames/s': frames done per second from the camera's start to the last block "
             "before the final one (which waits for the idle timeout). "
             "'caught up': seconds from the camera's last frame to the run's last block "
             "before the final one (then at most one block, which waits for the idle timeout, is left).", "",
             "| device | camera frames/s | timed frames | camera s | localized frames/s | max frames behind "
             "(while writing) | max s behind (while writing) | max frames / s behind (whole run) | caught up s "
             "| said slower | RssAnon at the camera's start / peak / last MiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| CPU | {r['rate']:g} | {r['frames'] - WARM_FRAMES} | {r['camera_s']:.1f} | "
                     f"{num(r['frames_per_s'], '{:.1f}')} | {num(r['max_behind_writing'])} | "
                     f"{num(r['max_seconds_writing'], '{:.1f}')} | "
                     f"{num(r['max_behind'])} / {num(r['max_seconds'], '{:.1f}')} | "
                     f"{num(r['after_camera_s'], '{:.1f}')} | "
                     f"{'yes' if r['slower_warning'] else 'no'} "
                     f"| {num(r['rss_first'])} / {num(r['rss_peak'])} / {num(r['rss_last'])} |")
        assert r["localized_frames"] == r["frames"], "the run left frames out"
    for r in rows:
        lines.append(f"| GPU | {r['rate']:g} | not measured (no GPU in this run) | | | | | | | | |")
    growth = "; ".join(f"{r['rate']:g} frames/s: +{r['rss_peak'] - r['rss_first']:.0f} MiB while up to "
                       f"{r['max_behind']} frames ({r['max_behind'] * SIDE * SIDE * 2 / 2**20:.0f} MiB of raw frames) "
                       "waited" for r in rows if r["rss_first"] is not None and r["max_behind"] is not None)
    said = sum(r["slower_warning"] for r in rows)
    lines += ["", f"Every run localized every frame the camera wrote (checked: frames in the final `movie.json` = "
              f"frames written). {said} of {len(rows)} runs said once that the device is slower than the camera. "
              f"RssAnon from the camera's start to its peak: {growth}. Frames that wait stay in the file.", "",
              f"![lag and memory]({out.with_suffix('.png').name})", ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", type=float, nargs="+", default=[10.0, 100.0, 400.0])
    p.add_argument("--seconds", type=float, default=10.0, help="camera time per rate (default 10)")
    p.add_argument("--max-frames", type=int, default=200, help="at most this many frames per rate (default 200)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default=str(RESULTS / "live.md"))
    args = p.parse_args()
    load_start = load_average()
    out = Path(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sim = simulate(folder)
        rows = []
        for rate in args.rates:
            n = WARM_FRAMES + max(2, min(args.max_frames, round(rate * args.seconds)))
            rows.append(one_rate(rate, np.resize(sim, (n, SIDE, SIDE)), folder, args.threads, args.device))
            print(f"{rate:g} frames/s: max {rows[-1]['max_behind']} frames behind, "
                  f"{rows[-1]['frames_per_s']} frames/s localized", flush=True)
    machine = machine_line(f"{args.threads} torch threads, device {args.device}", load_start=load_start)
    text = report(rows, command_line(), machine, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    plot(rows, out.with_suffix(".png"))
    print(text)


if __name__ == "__main__":
    main()
