"""The host path alone: localization writers, and postprocess + writers with the network replaced by stored output.

    python benchmarks/bench_host_path.py          # benchmarks/results/host_path.md + .png (a few minutes)
    python benchmarks/bench_host_path.py --quick  # smaller tables and movie, for a check

1. **Writers** through the public API: ``write_localizations(table, path)`` (one call) and ``open_writer`` fed
   blocks of 153,600 rows (a 256-frame block of ~600 emitters per frame, as ``infer`` writes), for ThunderSTORM
   CSV, parquet and Picasso HDF5, on a table with the columns ``infer`` writes in 2D (4 extras). For CSV the
   previous writer's text (``np.savetxt`` of the same columns, one Python ``%`` per row) is timed beside it on
   part of the table.
2. **Host path**: what ``infer`` does after the network, driven by stored network output: 16 distinct
   ``(10, 256, 256)`` output maps with ~600 emitters each (Gaussian blobs of detection probability, channels
   with plausible values), cycled over the movie's frames. Per run of 8 frames (one tile per frame, as at 256²
   on a GPU) ``postprocess.detect_candidates`` (on a GPU this part runs on the device), per 256-frame block
   ``predict.block_emitters`` (one copy, the float64 threshold, frame order) and ``StackOutputs.write`` (the
   writers' thread behind its 4-block queue), then the files are closed. "Stored candidates" rows start from
   the candidates as they leave the device (computed before the clock starts): the host's part alone, what a
   GPU run leaves to the CPU. "Stored output maps" rows run ``detect_candidates`` here too (on one CPU thread).
   Frames/s and localizations/s over the whole loop including the close; "loop blocked in write" is the time
   the loop waited for a full queue. Rows "in the loop's thread" call the writers directly instead (no queue),
   "no writers" stops after the tables: the ceiling the writers leave. Rows "device at 2000 frames/s" sleep
   (without the GIL, as a loop waiting for a GPU does) 4 ms per 8-frame run before a block's candidates are
   used: a device at the issue's goal pace; the host keeps pace when such a row reaches ~2000 frames/s.

Wall time and CPU time (``time.process_time``: all threads of the process) are both given: the machine is shared,
and CPU time per row depends less on what else runs. Medians of ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from command_line import command_line
from machine import commit, load_average, machine_line

RESULTS = Path(__file__).parent / "results"
PIXEL_SIZE = 100.0
SIDE = 256
BLOCK_FRAMES = 256
RUN_FRAMES = 8
EMITTERS_PER_FRAME = 600
DEVICE_PACE = 2000.0  # frames/s of the simulated device: the goal at 256² on a GPU
SUFFIX = {"csv": ".csv", "parquet": ".parquet", "picasso": ".hdf5"}
TARGETS = {"csv": 1.0, "parquet": 2.0, "picasso": 5.0}  # M rows/s through open_writer on a 2-core CPU (issue 34)


def localizations(n: int, seed: int = 0):
    """A table like infer's output at 256² (2D, 4 extras), frames in order, float32 as in memory."""
    from decode_mem.io.table import EmitterTable

    rng = np.random.default_rng(seed)
    return EmitterTable.from_arrays(
        frame=np.sort(rng.integers(0, max(1, n // EMITTERS_PER_FRAME), n)), x=rng.uniform(-0.5, SIDE - 0.5, n),
        y=rng.uniform(-0.5, SIDE - 0.5, n), z=np.zeros(n), photons=rng.gamma(4, 600, n), bg=rng.uniform(5, 60, n),
        prob=np.minimum(rng.uniform(0.4, 1.4, n), 1.0), sigma_x=rng.uniform(0.03, 0.4, n),
        sigma_y=rng.uniform(0.03, 0.4, n), sigma_photons=rng.uniform(20, 300, n))


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``fn``."""
    walls, cpus = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def bench_writers(n: int, repeats: int, work: Path) -> list[dict]:
    from decode_mem.io.localizations import open_writer, write_localizations
    from decode_mem.io.thunderstorm import ThunderstormWriter, thunderstorm_columns

    table = localizations(n)
    extras = ("prob", "sigma_x", "sigma_y", "sigma_photons")
    meta = {"pixel_size": PIXEL_SIZE, "width": SIDE, "height": SIDE}
    block = BLOCK_FRAMES * EMITTERS_PER_FRAME
    rows = []
    for fmt, suffix in SUFFIX.items():
        path = work / f"locs{suffix}"

        def whole(path: Path = path) -> None:
            write_localizations(table, path, **meta)

        def streamed(path: Path = path) -> None:
            with open_writer(path, extras=extras, **meta) as writer:
                for start in range(0, n, block):
                    writer.write(table.select(slice(start, start + block)))

        for how, fn in (("write_localizations (one call)", whole), (f"open_writer, blocks of {block:,}", streamed)):
            wall, cpu = timed(fn, repeats)
            rows.append({"format": fmt, "how": how, "rows": n, "wall_s": wall, "cpu_s": cpu,
                         "mb": path.stat().st_size / 1e6})
    # the previous CSV writer: np.savetxt of the same columns, on part of the table
    m = min(n, 300_000)
    part = table.select(slice(0, m))
    formats = ThunderstormWriter(work / "x.csv", PIXEL_SIZE, extras).formats

    def savetxt() -> None:
        cols = thunderstorm_columns(part, PIXEL_SIZE, extras)
        with open(work / "old.csv", "w", newline="") as fh:
            np.savetxt(fh, np.column_stack(list(cols.values())), fmt=formats, delimiter=",")

    wall, cpu = timed(savetxt, 1)
    rows.append({"format": "csv", "how": "previous writer (np.savetxt of the same columns)", "rows": m,
                 "wall_s": wall, "cpu_s": cpu, "mb": (work / "old.csv").stat().st_size / 1e6})
    return rows


def stored_output(n_maps: int, seed: int = 1):
    """``(n_maps, 10, 256, 256)`` float32 network output with ~600 emitters per map (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    from decode_mem.model.net import OUTPUT_CHANNELS

    rng = np.random.default_rng(seed)
    ch = {name: k for k, name in enumerate(OUTPUT_CHANNELS)}
    out = np.zeros((n_maps, len(OUTPUT_CHANNELS), SIDE, SIDE), np.float32)
    yy, xx = np.mgrid[-2:3, -2:3]
    for m in range(n_maps):
        spikes = np.zeros((SIDE, SIDE), np.float32)
        xs, ys = rng.uniform(0, SIDE - 1, EMITTERS_PER_FRAME), rng.uniform(0, SIDE - 1, EMITTERS_PER_FRAME)
        ix, iy = np.rint(xs).astype(int), np.rint(ys).astype(int)
        spikes[iy, ix] = 1.0
        kernel = np.exp(-(xx**2 + yy**2) / (2 * 0.6**2)).astype(np.float32) * 0.75
        p = F.conv2d(torch.from_numpy(spikes)[None, None], torch.from_numpy(kernel)[None, None], padding=2)[0, 0]
        p = np.clip(p.numpy() + rng.uniform(0, 0.02, (SIDE, SIDE)), 1e-6, 1 - 1e-6)
        out[m, ch["p_logit"]] = np.log(p) - np.log1p(-p)
        near = np.zeros((SIDE, SIDE), np.float32)
        near[iy, ix] = (xs - ix).astype(np.float32)
        out[m, ch["dx"]] = near + rng.uniform(-0.05, 0.05, (SIDE, SIDE))
        near[iy, ix] = (ys - iy).astype(np.float32)
        out[m, ch["dy"]] = near + rng.uniform(-0.05, 0.05, (SIDE, SIDE))
        out[m, ch["photons"]] = rng.gamma(4, 600, (SIDE, SIDE))
        out[m, ch["bg"]] = rng.uniform(5, 60, (SIDE, SIDE))
        for name in ("sigma_x", "sigma_y"):
            out[m, ch[name]] = rng.uniform(0.03, 0.4, (SIDE, SIDE))
        out[m, ch["sigma_z"]] = rng.uniform(10, 50, (SIDE, SIDE))
        out[m, ch["sigma_photons"]] = rng.uniform(20, 300, (SIDE, SIDE))
    return torch.from_numpy(out)


def candidates_of(maps, frames: int) -> list[list]:
    """Per 256-frame block, per run of 8 frames: ``detect_candidates`` of the stored maps (frames cycle over
    them), as they leave the device."""
    from decode_mem.postprocess import PostprocessConfig, detect_candidates

    config = PostprocessConfig()
    blocks = []
    for t0 in range(0, frames, BLOCK_FRAMES):
        runs = []
        for r0 in range(t0, min(t0 + BLOCK_FRAMES, frames), RUN_FRAMES):
            ids = np.arange(r0, min(r0 + RUN_FRAMES, t0 + BLOCK_FRAMES, frames))
            first = r0 % len(maps)  # runs of 8 over 16 maps: never wraps; a view, as the device's output
            runs.append(detect_candidates(maps[first:first + len(ids)], ids, config=config,
                                          core=(slice(None), slice(None))))
        blocks.append(runs)
    return blocks


def host_path(source, frames: int, formats: tuple[str, ...], mode: str, work: Path, pace: float = 0.0) -> dict:
    """One pass over ``frames`` frames: ``source`` is the stored maps (postprocess runs here, on the CPU) or
    the stored candidates of ``candidates_of`` (the host's part only); ``mode``: 'thread', 'direct' or 'none';
    ``pace``: frames/s of a simulated device (a GIL-free sleep per block before its candidates are used)."""
    from contextlib import ExitStack

    from decode_mem.infer.outputs import StackOutputs
    from decode_mem.infer.predict import block_emitters
    from decode_mem.io.localizations import open_writer
    from decode_mem.postprocess import PostprocessConfig

    config = PostprocessConfig()
    shape = (frames, SIDE, SIDE)
    for p in work.iterdir():
        p.unlink()
    n_rows, blocked = 0, 0.0
    wall, cpu = time.perf_counter(), time.process_time()
    with ExitStack() as stack:
        if mode == "thread":
            outs = stack.enter_context(StackOutputs(work, "movie", formats, pixel_size=PIXEL_SIZE, shape=shape))
            write = outs.write
        elif mode == "direct":
            extras = ("prob", "sigma_x", "sigma_y", "sigma_photons")
            writers = [stack.enter_context(open_writer(work / f"movie{SUFFIX[f]}", pixel_size=PIXEL_SIZE,
                                                       width=SIDE, height=SIDE, frames=frames, extras=extras))
                       for f in formats]

            def write(table) -> None:
                for w in writers:
                    w.write(table)
        else:
            def write(table) -> None:
                pass
        blocks = source if isinstance(source, list) else candidates_of(source, frames)
        for runs in blocks:
            if pace:
                time.sleep(RUN_FRAMES * len(runs) / pace)
            table = block_emitters(runs, config, (SIDE, SIDE))
            n_rows += len(table)
            before = time.perf_counter()
            write(table)
            blocked += time.perf_counter() - before
    return {"source": "candidates" if isinstance(source, list) else "maps",
            "formats": "+".join(formats) if formats else "–", "mode": mode, "frames": frames, "rows": n_rows,
            "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu, "blocked_s": blocked,
            "pace": pace}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the writer benchmark")
    parser.add_argument("--frames", type=int, default=2048, help="frames of the host-path movie (256²)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="200k rows, 512 frames, 1 repeat")
    parser.add_argument("--out", type=Path, default=RESULTS / "host_path.md")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.frames, args.repeats = 200_000, 512, 1
    import torch

    torch.set_num_threads(1)  # the network's device is elsewhere; postprocess on one core, the writers on the other
    load_start, at, started = load_average(), commit(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_host_path_") as tmp:
        work = Path(tmp)
        writer_rows = bench_writers(args.rows, args.repeats, work)
        maps = stored_output(16)
        stored = candidates_of(maps, args.frames)
        (work / "movie").mkdir()
        runs = []
        every = ("csv", "parquet", "picasso")
        cases = [(stored, (), "none", 0.0)]
        cases += [(stored, formats, mode, 0.0) for formats in (("csv",), ("parquet",), ("picasso",), every)
                  for mode in ("thread", "direct")]
        cases += [(stored, formats, mode, DEVICE_PACE) for formats in (("csv",), every)
                  for mode in ("thread", "direct")]
        cases += [(maps, (), "none", 0.0), (maps, every, "thread", 0.0), (maps, every, "direct", 0.0)]
        for source, formats, mode, pace in cases:
            passes = [host_path(source, args.frames, formats, mode, work / "movie", pace)
                      for _ in range(args.repeats)]
            runs.append(sorted(passes, key=lambda r: r["wall_s"])[len(passes) // 2])
    minutes = (time.perf_counter() - started) / 60
    machine = (f"{machine_line(1, load_start=load_start, at=at)}; numpy {np.__version__}, "
               f"pyarrow {_version('pyarrow')}, h5py {_version('h5py')}")
    report(args, writer_rows, runs, machine, minutes)


def _version(name: str) -> str:
    import importlib

    return importlib.import_module(name).__version__


def report(args: argparse.Namespace, writer_rows: list[dict], runs: list[dict], machine: str, minutes: float) -> None:
    from decode_mem.io.atomic import atomic_output

    lines = ["# Host path: writers, and postprocess + writers without the network", "",
             f"Command: `{command_line()}` ({minutes:.1f} min in all).", "", f"Machine: {machine}.", "",
             "\n\n".join(__doc__.split("\n\n")[2:]).strip(), "", "## Writers", "",
             "| format | how | rows | wall s | M rows/s (wall) | CPU s | M rows/s (CPU) | file MB |",
             "|---|---|---|---|---|---|---|---|"]
    for r in writer_rows:
        lines.append(f"| {r['format']} | {r['how']} | {r['rows']:,} | {r['wall_s']:.2f} | "
                     f"{r['rows'] / r['wall_s'] / 1e6:.2f} | {r['cpu_s']:.2f} | {r['rows'] / r['cpu_s'] / 1e6:.2f} | "
                     f"{r['mb']:.1f} |")
    lines += ["", "Against the targets of issue 34 (the better of the two ways of writing; CPU time is what the writer "
              "costs one core, wall time what it took on this machine with its load):", "",
              "| format | target M rows/s | M rows/s (wall) | M rows/s (CPU) | met in wall time | met in CPU time |",
              "|---|---|---|---|---|---|"]
    for fmt, target in TARGETS.items():
        mine = [r for r in writer_rows if r["format"] == fmt and not r["how"].startswith("previous")]
        wall = max(r["rows"] / r["wall_s"] / 1e6 for r in mine)
        cpu = max(r["rows"] / r["cpu_s"] / 1e6 for r in mine)
        lines.append(f"| {fmt} | {target:g} | {wall:.2f} | {cpu:.2f} | {'yes' if wall >= target else 'no'} | "
                     f"{'yes' if cpu >= target else 'no'} |")
    lines += ["", "## Host path (stored network output, 256², ~600 emitters per frame)", "",
              "| from | formats | writers | frames | localizations | wall s | frames/s | M loc/s | CPU s | "
              "loop blocked in write (s) |", "|---|---|---|---|---|---|---|---|---|---|"]
    how = {"thread": "thread behind a 4-block queue (StackOutputs)", "direct": "in the loop's thread",
           "none": "no writers"}
    source = {"candidates": "stored candidates (host part only)",
              "maps": "stored output maps (+ detect_candidates on the CPU)"}
    for r in runs:
        paced = f", device at {r['pace']:.0f} frames/s" if r["pace"] else ""
        lines.append(f"| {source[r['source']]}{paced} | {r['formats']} | {how[r['mode']]} | {r['frames']} | "
                     f"{r['rows']:,} | "
                     f"{r['wall_s']:.2f} | "
                     f"{r['frames'] / r['wall_s']:.0f} | {r['rows'] / r['wall_s'] / 1e6:.2f} | {r['cpu_s']:.2f} | "
                     f"{r['blocked_s']:.2f} |")
    lines += ["", "![writers and host path](host_path.png)", ""]
    with atomic_output(args.out) as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    plot(writer_rows, runs, args.out.with_suffix(".png"))


def plot(writer_rows: list[dict], runs: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    from decode_mem.io.atomic import atomic_output

    fig = Figure(figsize=(12, 4.8))
    left, right = fig.subplots(1, 2)
    labels = [f"{r['format']}\n{r['how'].split(',')[0].split(' (')[0]}" for r in writer_rows]
    left.barh(labels, [r["rows"] / r["wall_s"] / 1e6 for r in writer_rows], label="wall")
    left.barh(labels, [r["rows"] / r["cpu_s"] / 1e6 for r in writer_rows], height=0.35, label="CPU")
    for fmt, target in TARGETS.items():
        left.axvline(target, color="grey", linestyle=":", linewidth=1)
        left.text(target, len(labels) - 0.4, f"{fmt} target", fontsize=6, rotation=90, va="top", ha="right")
    left.set_xscale("log")
    left.set_xlabel("M rows/s")
    left.set_title("writers")
    left.legend()
    left.tick_params(axis="y", labelsize=7)
    names = [f"{r['source']}: {r['formats']}\n{r['mode']}{' @ device pace' if r['pace'] else ''}" for r in runs]
    right.barh(names, [r["frames"] / r["wall_s"] for r in runs])
    right.axvline(DEVICE_PACE, color="grey", linestyle=":", linewidth=1)
    right.set_xlabel("frames/s (256², ~600 emitters/frame); dotted: the goal pace of a GPU")
    right.set_title("host path, network replaced by stored output")
    right.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")


if __name__ == "__main__":
    main()
