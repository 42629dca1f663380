"""Speed and memory of rendering by localization precision: 10^6 localizations drawn as Gaussians of their own σ
(``render.image.Rendering``, blur 'precision') beside the same drawn as a histogram ('none') and as a histogram
blurred by one Gaussian ('gaussian'). Writes ``benchmarks/results/render_speed.md``.

    python benchmarks/bench_render.py [--rows 1000000] [--repeats 2]

Cases (uniform random localizations, precisions lognormal around a median, tables of 2^16 rows as a file streams
them): a 25.6 µm field with 20 nm precision (the render pixel chosen from the data: 10 nm, 2560² pixels); a
205 µm field (the pixel bounded by 4096 pixels a side: 50 nm, every σ at the one-pixel floor); a 6.4 µm field on
2 nm pixels given (σ of 10 pixels: drawn on coarser grids); and ``render_file`` on a parquet file of the first
case (reading included). Each time is the best of ``--repeats`` runs in this process; the peak is the largest
block of memory numpy held at once during a run (``tracemalloc``), beside the image's own size.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
from command_line import command_line
from machine import commit, load_average, machine_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TABLE_ROWS = 1 << 16
CASES = (  # name, camera px (H = W), camera pixel nm, median precision nm, render pixel nm (None: chosen)
    ("25.6 µm field, pixel chosen", 256, 100.0, 20.0, None),
    ("205 µm field, pixel chosen (bounded)", 2048, 100.0, 20.0, None),
    ("6.4 µm field, --pixel 2", 64, 100.0, 20.0, 2.0),
)


def tables(rows: int, side: int, pixel_size: float, median_nm: float, seed: int = 0):
    """The localizations in tables of ``TABLE_ROWS`` (camera px; precisions lognormal, sd 0.4 in log)."""
    from decode_mem.io.table import EmitterTable

    rng = np.random.default_rng(seed)
    for start in range(0, rows, TABLE_ROWS):
        n = min(TABLE_ROWS, rows - start)
        sigma = median_nm * rng.lognormal(0.0, 0.4, n) / pixel_size
        yield EmitterTable.from_arrays(frame=np.zeros(n, np.int64), x=rng.uniform(-0.5, side - 0.5, n),
                                       y=rng.uniform(-0.5, side - 0.5, n), photons=np.full(n, 1000.0),
                                       sigma_x=sigma, sigma_y=sigma * rng.uniform(0.9, 1.1, n))


def measure(run, repeats: int) -> tuple[float, float, object]:
    """Best wall seconds of ``run()`` over ``repeats``, the largest traced peak (MiB) and the last result."""
    best, peak, result = float("inf"), 0.0, None
    for _ in range(repeats):
        tracemalloc.start()
        t0 = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - t0)
        peak = max(peak, tracemalloc.get_traced_memory()[1] / 2**20)
        tracemalloc.stop()
    return best, peak, result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)
    load0, at = load_average(), commit()

    from decode_mem.io.localizations import write_localizations
    from decode_mem.io.table import EmitterTable
    from decode_mem.render.image import Rendering, render_file

    rows = []
    for name, side, pixel_size, median, render_pixel in CASES:
        data = list(tables(args.rows, side, pixel_size, median))  # made before the clock starts
        for blur in ("precision", "none", "gaussian"):
            def run(blur=blur, data=data, side=side, pixel_size=pixel_size, render_pixel=render_pixel, median=median):
                rendering = Rendering(shape_px=(side, side), pixel_size=pixel_size, render_pixel=render_pixel,
                                      blur=blur, sigma=median if blur == "gaussian" else None)
                for table in data:
                    rendering.add(table)
                return rendering.image(consume=True), rendering.render_pixel

            seconds, peak, (image, rp) = measure(run, args.repeats)  # the tables, made before, are not traced
            rows.append((name, blur, f"{rp:g} nm, {image.shape[1]}²", seconds, peak, image.nbytes / 2**20,
                         float(image.sum())))
        del data
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "locs.parquet"
        write_localizations(EmitterTable.concat(tables(args.rows, 256, 100.0, 20.0)), path, pixel_size=100.0,
                            width=256, height=256)
        seconds, peak, done = measure(lambda: render_file(path, Path(tmp) / "image.tif"), args.repeats)
        rows.append(("render_file, parquet of the first case", "precision",
                     f"{done.render_pixel:g} nm, {done.image.shape[1]}²", seconds, peak, done.image.nbytes / 2**20,
                     float(done.image.sum())))

    lines = ["# Rendering by localization precision: speed and memory", "",
             f"Command: `{command_line(argv)}`", "",
             f"Machine: {machine_line('numpy only', load_start=load0, at=at)}", "",
             f"{args.rows:,} localizations per case, uniform over the field, precision lognormal around 20 nm "
             f"(sd 0.4 in log), σx and σy 10 % apart; tables of {TABLE_ROWS:,} rows. Time: best of {args.repeats} "
             "runs. Peak: the most memory numpy held at once during a run (tracemalloc; the tables, made before "
             "the run, left out; pyarrow's own reading buffers are not traced); the image: its float32 size.", "",
             "| case | blur | render pixel, image | seconds | localizations/s | peak MiB | image MiB | image sum |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for name, blur, size, seconds, peak, image_mib, total in rows:
        lines.append(f"| {name} | {blur} | {size} | {seconds:.2f} | {args.rows / seconds:,.0f} | {peak:.0f} | "
                     f"{image_mib:.0f} | {total:,.0f} |")
    lines += ["", "The image sum is the localizations drawn, less what Gaussians spill over the field's border "
              "(a histogram's is every localization inside). The shared machine's load is in the machine line."]
    out = RESULTS / "render_speed.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
