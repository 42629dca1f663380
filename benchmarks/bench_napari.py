"""decode_mem in napari: the time to open a 10^7-row localization file and its peak RssAnon, and the screenshots of
the plugin (the sample data with the Localize widget; the Live widget mid-run). Writes
``benchmarks/results/napari.md`` + ``.json`` and ``benchmarks/results/screenshots/napari_*.png``.

    python benchmarks/bench_napari.py [--rows 1000000,10000000] [--work /tmp/bench_napari] [--formats parquet,csv]

Each file is generated (uniform random localizations over a 256 x 256 px camera of 100 nm, 10^4 frames, with
the columns infer writes), then opened in a fresh process twice: by the reader's library call
(``decode_mem.napari.layers.open_localizations``: the rendered image from every row, streamed, and a 10^6-point
subsample) and by napari itself (``viewer.open(path, plugin="decode_mem")`` in a shown viewer, drawn once). The
peak RssAnon of that process is sampled from outside (``ProcessPeak``), beside what it held before the open
(imports, the viewer). Needs an X display: without one the script runs itself under ``xvfb-run``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from command_line import command_line
from machine import commit, load_average, machine_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SHOTS = RESULTS / "screenshots"
FIELD, PIXEL, FRAMES = 256, 100.0, 10_000
CHUNK = 1_000_000
LIVE_RATE = 5.0  # frames/s the live screenshot's writer adds (300 frames of 64 x 64 px: a minute)


def make_file(path: Path, rows: int, seed: int = 0) -> float:
    """``rows`` random localizations (infer's columns) written in chunks; returns the seconds it took."""
    import numpy as np

    from decode_mem.io.localizations import open_writer
    from decode_mem.io.table import EmitterTable

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    extras = ("prob", "sigma_x", "sigma_y", "sigma_photons")
    with open_writer(path, pixel_size=PIXEL, width=FIELD, height=FIELD, frames=FRAMES, extras=extras,
                     three_d=False) as writer:
        for start in range(0, rows, CHUNK):
            n = min(CHUNK, rows - start)
            s = rng.uniform(0.05, 0.3, n)
            writer.write(EmitterTable.from_arrays(
                frame=np.sort(rng.integers(0, FRAMES, n)), x=rng.uniform(-0.5, FIELD - 0.5, n),
                y=rng.uniform(-0.5, FIELD - 0.5, n), photons=rng.uniform(500, 5000, n), bg=rng.uniform(5, 50, n),
                prob=rng.uniform(0.4, 1, n), sigma_x=s, sigma_y=s, sigma_photons=rng.uniform(20, 80, n)))
    if path.suffix == ".csv":  # a CSV records no camera: infer's summary beside it does
        path.with_suffix(".json").write_text(json.dumps({"camera": {"pixel_size": PIXEL},
                                                         "shape": [FRAMES, FIELD, FIELD]}))
    return time.perf_counter() - t0


# ------------------------------------------------------------------------------------------ child processes

def child_open(how: str, path: str) -> None:
    """Open ``path`` (``library`` or ``napari``); print JSON: seconds, RssAnon before, what was shown."""
    from decode_mem.memory import read_host_memory

    if how == "library":
        from decode_mem.napari.layers import open_localizations

        before = read_host_memory()["rss_anon_mb"]
        print("READY", flush=True)
        t0 = time.perf_counter()
        opened = open_localizations(path)
        seconds = time.perf_counter() - t0
        shown, n = opened.shown, opened.n
    else:
        import napari
        from qtpy.QtWidgets import QApplication

        viewer = napari.Viewer(show=True)
        QApplication.processEvents()
        before = read_host_memory()["rss_anon_mb"]
        print("READY", flush=True)
        t0 = time.perf_counter()
        layers = viewer.open(path, plugin="decode_mem")
        seconds = time.perf_counter() - t0
        viewer.screenshot(canvas_only=True)  # the first draw: the layers go to OpenGL too
        draw_s = time.perf_counter() - t0 - seconds
        shown, n = len(layers[1].data), layers[1].metadata["decode_mem"]["localizations"]
        viewer.close()
    print(json.dumps({"seconds": seconds, "before_mb": before, "shown": shown, "localizations": n,
                      **({"draw_s": draw_s} if how == "napari" else {})}), flush=True)


def child_screenshot_sample(out: str) -> None:
    """The viewer with the quick start's sample (movie, render, points) and the Localize widget docked."""
    import napari
    from qtpy.QtWidgets import QApplication

    viewer = napari.Viewer(show=True)
    viewer.window.resize(1500, 900)
    viewer.open_sample("decode_mem", "nuclear_pores_localized")
    viewer.window.add_plugin_dock_widget("decode_mem", "Localize")
    points = next(layer for layer in viewer.layers if layer.name.endswith("localizations"))
    points.visible = False  # the rendered rings; the points are one click away
    viewer.reset_view()
    viewer.camera.zoom *= 2.5  # the middle 4 µm: rings of 107 nm
    for _ in range(20):
        QApplication.processEvents()
        time.sleep(0.05)
    viewer.screenshot(out, canvas_only=False)
    viewer.close()


def child_screenshot_live(out: str, work: str) -> None:
    """The Live widget following a TIFF that a writer process grows (tests/inference/live_writer.py), mid-run."""
    import napari
    import numpy as np
    import tifffile
    from qtpy.QtWidgets import QApplication

    from decode_mem.napari.live import LiveWidget
    from decode_mem.napari.localize import A_FILE
    from decode_mem.napari.sample import sample_movie

    work_dir = Path(work)
    movie = sample_movie(work_dir / "live_sample", frames=300, size=64)
    np.save(work_dir / "frames.npy", tifffile.imread(movie))
    target = work_dir / "acquisition.tif"
    target.unlink(missing_ok=True)
    writer = subprocess.Popen([sys.executable, str(ROOT / "tests" / "inference" / "live_writer.py"), "tiff",
                               str(work_dir / "frames.npy"), str(target), "--rate", str(LIVE_RATE)])
    while not target.exists():
        time.sleep(0.01)
    viewer = napari.Viewer(show=True)
    viewer.window.resize(1500, 900)
    widget = LiveWidget(viewer)
    viewer.window.add_dock_widget(widget, name="decode_mem: Live", area="right")
    widget.source.value = A_FILE
    widget.path.value, widget.out.value, widget.device.value = target, work_dir / "live_out", "cpu"
    widget.block.value, widget.idle_timeout.value, widget.refresh.value = 8, 5.0, 2.0
    widget.start()
    shot = False
    while widget.running:
        QApplication.processEvents()
        time.sleep(0.02)
        live = viewer.layers["acquisition live"] if "acquisition live" in viewer.layers else None  # noqa: SIM401
        if not shot and live is not None and live.metadata["decode_mem"]["frames"] >= 120:
            viewer.reset_view()
            for _ in range(10):
                QApplication.processEvents()
                time.sleep(0.05)
            viewer.screenshot(out, canvas_only=False)
            shot = True
            print(json.dumps({"live_frames": live.metadata["decode_mem"]["frames"], "lag": widget.lag.value}),
                  flush=True)
    writer.wait(60)
    viewer.close()


# ------------------------------------------------------------------------------------------------ parent

def measure(how: str, path: Path) -> dict:
    """Run ``child_open`` in a fresh process; its peak RssAnon from outside."""
    from decode_mem.memory.peaks import ProcessPeak

    proc = subprocess.Popen([sys.executable, __file__, "--child", "open", how, str(path)], stdout=subprocess.PIPE,
                            text=True, cwd=ROOT / "benchmarks")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY"
    peak = ProcessPeak(proc, interval=0.01)
    lines = proc.stdout.read().strip().splitlines()
    assert proc.wait() == 0, f"{how} open of {path} failed"
    peak.join()
    return {**json.loads(lines[-1]), "peak_mb": peak.peak_mb}


def table_mb(rows: int) -> float:
    """What the file's rows take as one in-memory table (``read_localizations``: EmitterTable's columns)."""
    return rows * (8 + 4 * 10) / 2**20  # frame int64 + x, y, z, photons, bg, prob, sigma_x/y/z, sigma_photons


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="1000000,10000000", help="comma-separated file lengths")
    p.add_argument("--work", default="/tmp/bench_napari")
    p.add_argument("--formats", default="parquet,csv")
    p.add_argument("--out", default=str(RESULTS / "napari.md"))
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        {"open": lambda a: child_open(a[0], a[1]), "sample": lambda a: child_screenshot_sample(a[0]),
         "live": lambda a: child_screenshot_live(a[0], a[1])}[args.child[0]](args.child[1:])
        return
    if not os.environ.get("DISPLAY") and shutil.which("xvfb-run"):
        os.execvp("xvfb-run", ["xvfb-run", "-a", "-s", "-screen 0 1920x1080x24", sys.executable, *sys.argv])
    at, load_start, command = commit(), load_average(), command_line()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for fmt, n_rows in ((f, int(n)) for f in args.formats.split(",") for n in args.rows.split(",")):
        path = work / f"locs_{n_rows}.{fmt}"
        made = None
        if not path.is_file():
            made = make_file(path, n_rows)
        row = {"format": fmt, "rows": n_rows, "file_mb": path.stat().st_size / 2**20,
               "made_s": made, "library": measure("library", path), "napari": measure("napari", path)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    SHOTS.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, XDG_CACHE_HOME=str(work / "cache"))
    subprocess.run([sys.executable, __file__, "--child", "sample", str(SHOTS / "napari_sample.png")], check=True,
                   env=env, cwd=ROOT / "benchmarks")
    live = subprocess.run([sys.executable, __file__, "--child", "live", str(SHOTS / "napari_live.png"), str(work)],
                          check=True, env=env, cwd=ROOT / "benchmarks", capture_output=True, text=True)
    live_state = json.loads(live.stdout.strip().splitlines()[-1])
    write_report(Path(args.out), rows, live_state, command, machine_line(1, load_start=load_start, at=at))


def write_report(out: Path, rows: list[dict], live: dict, command: str, machine: str) -> None:
    from decode_mem.io.atomic import atomic_output

    def mb(v: float | None) -> str:
        return "n/a" if v is None else f"{v:,.0f}"

    lines = [
        "# decode_mem in napari: opening a 10^7-row localization file",
        "",
        f"`{command}`",
        "",
        f"Machine: {machine}.",
        "",
        f"Each file: uniform random localizations over a {FIELD} x {FIELD} px camera of {PIXEL:g} nm, "
        f"{FRAMES:,} frames, with the columns infer writes; opened in a fresh process (RssAnon before = imports, "
        "and for napari a shown viewer; peak sampled from outside every 10 ms). *library*: "
        "`decode_mem.napari.layers.open_localizations` (the reader's layer data: the render of every row, "
        "streamed, at 10 nm, and a uniform 10^6-point subsample); *napari*: `viewer.open(path, plugin=\"decode_mem\")` "
        "in a shown viewer under Xvfb (the layers added), then its first draw (Mesa's software OpenGL on the "
        "CPU: a GPU draws the points far faster).",
        "",
        "| file | rows | on disk (MiB) | open (s), library | RssAnon before -> peak (MiB), library "
        "| open (s), napari | first draw (s), napari | RssAnon before -> peak (MiB), napari | points shown "
        "| all rows as a table (MiB) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lib, nap = r["library"], r["napari"]
        lines.append(f"| {r['format']} | {r['rows']:,} | {r['file_mb']:,.0f} | {lib['seconds']:.1f} | "
                     f"{mb(lib['before_mb'])} -> {mb(lib['peak_mb'])} | {nap['seconds']:.1f} | {nap['draw_s']:.1f} | "
                     f"{mb(nap['before_mb'])} -> {mb(nap['peak_mb'])} | {nap['shown']:,} of "
                     f"{nap['localizations']:,} | {table_mb(r['rows']):,.0f} |")
    lines += [
        "",
        "The peak above the process's start is pyarrow's reader (chunks of 2^16 rows), the render (one "
        "2560² float32 image per blur class of the file's precisions, `render`'s 'precision' blur), the "
        "10^6-point subsample with its features and, for napari, its copies of the layers (points, features, "
        "colours, OpenGL buffers). Compare the 10^6- and 10^7-row rows of a format for how it grows with the "
        "file, and the last column for what holding every row would take.",
        "",
        "## Screenshots (taken by this run, headless)",
        "",
        "The quick start's sample (`File > Open Sample > decode_mem`): the simulated nuclear-pore movie, its "
        "localizations rendered at 10 nm (points hidden), and the Localize widget:",
        "",
        "![napari with the sample data](screenshots/napari_sample.png)",
        "",
        f"The Live widget following a TIFF that a writer process grows at {LIVE_RATE:g} frames/s (64 x 64 px), at "
        f"{live['live_frames']} frames localized; the widget said: \"{live['lag']}\":",
        "",
        "![the Live widget mid-run](screenshots/napari_live.png)",
        "",
    ]
    with atomic_output(out) as tmp:
        tmp.write_text("\n".join(lines))
    with atomic_output(out.with_suffix(".json")) as tmp:
        tmp.write_text(json.dumps({"command": command, "machine": machine, "rows": rows, "live": live}, indent=1))


if __name__ == "__main__":
    main()
