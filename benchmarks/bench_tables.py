"""Localization tables in and out: rows/s read and written per format and peak RssAnon, for a 10^8-row table, and
converting it from each format into another.

    python benchmarks/bench_tables.py --workdir benchmarks/scratch   # 10^8 rows: results/tables.md + .json (~1 h)
    python benchmarks/bench_tables.py --smoke                        # 10^6 rows, a check (a minute)

The table is what ``infer`` writes in 2-D (frame, x, y, photons, bg, prob, sigma_x, sigma_y, sigma_photons; ~600
localizations per frame on a 2048² px field of 100 nm pixels), made block by block from 4 random blocks of 2^18 rows
cycled with their frames moved on (so no compressor sees a repeat within 8 MiB). Each format is written through
``io.localizations.open_writer`` in those blocks, read back through ``iter_localizations`` (the jobs' reader, its own
chunks), then converted into the next format with ``convert_file``; rapidSTORM, read only, is written by this
script as rapidSTORM's text. Every run is a fresh subprocess whose peak RssAnon (``/proc/self/status``, sampled
every 2 ms: ``bench_io.PeakSampler``) is recorded beside the RssAnon after its imports; files are evicted from the
page cache before every read (``bench_io.evict``) and each file is deleted after its conversion. Seconds are wall
time on a shared machine (its load is in the report).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from bench_io import PeakSampler, evict, proc_status_kb
from command_line import command_line
from machine import commit, load_average, machine_line

RESULTS = Path(__file__).parent / "results"
PIXEL = 100.0  # nm
SIDE = 2048  # px
PER_FRAME = 600  # localizations per frame
BLOCK = 1 << 18  # rows per block written
POOL = 4  # distinct blocks cycled
EXTRAS = ("prob", "sigma_x", "sigma_y", "sigma_photons")
SUFFIX = {"csv": ".csv", "parquet": ".parquet", "picasso": ".hdf5", "decode": ".h5", "smap": "_sml.mat",
          "smlm": ".smlm", "rapidstorm": ".txt"}
NAMES = {"csv": "ThunderSTORM CSV", "parquet": "parquet", "picasso": "Picasso HDF5", "decode": "DECODE h5",
         "smap": "SMAP _sml.mat (v7.3)", "smlm": "ShareLoc .smlm", "rapidstorm": "rapidSTORM .txt"}
ORDER = ("csv", "parquet", "picasso", "decode", "smap", "smlm", "rapidstorm")
CONVERT_TO = {"csv": "smap", "parquet": "csv", "picasso": "parquet", "decode": "picasso", "smap": "smlm",
              "smlm": "decode", "rapidstorm": "smlm"}
MiB = 2**20


# -- the table --------------------------------------------------------------------------------------------------

def pool(seed: int = 0) -> list[dict[str, np.ndarray]]:
    """POOL blocks of BLOCK rows: float32 columns as in memory, frames sorted from 0."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(POOL):
        s = rng.gamma(4, 0.03, BLOCK).astype(np.float32)
        out.append({"frame": np.sort(rng.integers(0, BLOCK // PER_FRAME, BLOCK)),
                    "x": rng.uniform(-0.5, SIDE - 0.5, BLOCK).astype(np.float32),
                    "y": rng.uniform(-0.5, SIDE - 0.5, BLOCK).astype(np.float32), "z": np.zeros(BLOCK, np.float32),
                    "photons": rng.gamma(4, 600, BLOCK).astype(np.float32),
                    "bg": rng.uniform(5, 60, BLOCK).astype(np.float32),
                    "prob": rng.uniform(0.3, 1, BLOCK).astype(np.float32), "sigma_x": s,
                    "sigma_y": (s * rng.uniform(0.8, 1.25, BLOCK)).astype(np.float32),
                    "sigma_photons": rng.gamma(4, 40, BLOCK).astype(np.float32)})
    return out


def blocks(rows: int):
    """The table's blocks, frames running on from block to block."""
    from decode_mem.io.table import EmitterTable

    base = pool()
    step = BLOCK // PER_FRAME
    for i, start in enumerate(range(0, rows, BLOCK)):
        b = base[i % POOL]
        k = min(BLOCK, rows - start)
        cols = {c: v[:k] for c, v in b.items()}
        cols["frame"] = cols["frame"] + i * step
        yield EmitterTable(cols)


def frames_of(rows: int) -> int:
    return -(-rows // BLOCK) * (BLOCK // PER_FRAME)


def write_rapidstorm(path: Path, rows: int) -> None:
    """rapidSTORM's text: its XML header, then x, y (nm), frame (from 0), amplitude, background, one row a line."""
    from decode_mem.io.csv_text import csv_lines

    fields = (("Position-0-0", "nanometer"), ("Position-1-0", "nanometer"), ("ImageNumber-0-0", "frame"),
              ("Amplitude-0-0", "A/D count"), ("LocalBackground-0-0", "A/D count"))
    head = '# <localizations insequence="true" repetitions="variable">' + "".join(
        f'<field identifier="{i}" syntax="floating point" unit="{u}" />' for i, u in fields) + "</localizations>\n"
    with open(path, "wb") as fh:
        fh.write(head.encode())
        for t in blocks(rows):
            cols = [(t["x"].astype(np.float64) + 0.5) * PIXEL, (t["y"].astype(np.float64) + 0.5) * PIXEL,
                    t["frame"], t["photons"].astype(np.float64), t["bg"].astype(np.float64)]
            for text in csv_lines(cols, ["%.4f", "%.4f", "%d", "%.4f", "%.4f"]):
                fh.write(text.replace(b",", b" "))


# -- children: each run in a fresh process ------------------------------------------------------------------------

def child(spec: dict) -> dict:
    from decode_mem.io.localizations import convert_file, iter_localizations, open_writer

    rows, path = int(spec["rows"]), Path(spec["path"])
    base = proc_status_kb()["RssAnon"]
    sampler = PeakSampler()
    sampler.start()
    t0 = time.perf_counter()
    n = 0
    if spec["op"] == "write" and spec["fmt"] == "rapidstorm":
        write_rapidstorm(path, rows)
        n = rows
    elif spec["op"] == "write":
        with open_writer(path, pixel_size=PIXEL, width=SIDE, height=SIDE, frames=frames_of(rows), extras=EXTRAS,
                         three_d=False) as writer:
            for t in blocks(rows):
                writer.write(t)
                n += len(t)
    elif spec["op"] == "read":
        last = 0.0
        for t in iter_localizations(path):
            n += len(t)
            last += float(t["x"][-1]) if len(t) else 0.0
    else:
        n = convert_file(path, Path(spec["target"]), pixel_size=PIXEL)
    seconds = time.perf_counter() - t0
    sampler.stop()
    out = Path(spec.get("target", path))
    size = sum(p.stat().st_size for p in out.parent.glob(out.stem + ".*") if p.is_file())
    return {"seconds": seconds, "rows": n, "base_anon_kb": base, "peak_anon_kb": sampler.peak_anon, "bytes": size}


def run_child(spec: dict) -> dict:
    cmd = [sys.executable, __file__, "--child", json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=Path(__file__).parent)
    if proc.returncode != 0:
        raise RuntimeError(f"{spec}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- report -------------------------------------------------------------------------------------------------------

def rate(rec: dict | None) -> str:
    return "n/a" if rec is None else f"{rec['rows'] / rec['seconds'] / 1e6:.2f}"


def mib(rec: dict | None, key: str = "peak_anon_kb") -> str:
    return "n/a" if rec is None else f"{rec[key] / 1024:.0f}"


def write_report(results: dict, args: argparse.Namespace, info: dict) -> Path:
    rows = args.rows
    peak = max(r["peak_anon_kb"] for f in results.values() for r in f.values() if r is not None) / 1024
    lines = [
        "# Localization tables in and out (bench_tables.py)",
        "",
        f"Command: `{args.command}`. Machine: {info['machine']}. Total {info['seconds'] / 60:.1f} min.",
        "",
        f"{rows:,} localizations ({frames_of(rows):,} frames, the 2-D columns `infer` writes), written through "
        "`open_writer` in blocks of 2^18 rows, read back with `iter_localizations` (each file evicted from the page "
        "cache first), converted into another format with `convert_file`. Rates in million rows per second of "
        "wall time; RssAnon is each run's peak (its subprocess); the least RssAnon after the imports is below the "
        "table.",
        "",
        f"**Peak RssAnon of every run: {peak:.0f} MiB** (the goal: under 1024 MiB for a 10^8-row table).",
        "",
        "| format | bytes/row | write M rows/s | peak RssAnon write (MiB) | read M rows/s | peak RssAnon read (MiB) | "
        "converted into | M rows/s | peak RssAnon (MiB) |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for fmt in ORDER:
        if fmt not in results:
            continue
        r = results[fmt]
        w, rd, cv = r.get("write"), r.get("read"), r.get("convert")
        write_rate = "n/a (read only; written by this script)" if fmt == "rapidstorm" else rate(w)
        lines.append(f"| {NAMES[fmt]} | {w['bytes'] / w['rows']:.1f} | {write_rate} | {mib(w)} | {rate(rd)} | "
                     f"{mib(rd)} | {NAMES[CONVERT_TO[fmt]]} | {rate(cv)} | {mib(cv)} |")
    base = min(r["base_anon_kb"] for f in results.values() for r in f.values() if r is not None) / 1024
    lines += [
        "",
        f"RssAnon after the imports: {base:.0f} MiB and more (numpy, pyarrow, h5py, decode_mem's io); the blocks "
        f"the table is made from: {POOL} x 2^18 rows, about {POOL * BLOCK * 40 / MiB:.0f} MiB, in every write run.",
        "",
        "What bounds each: every reader yields chunks of about 2^20 rows and every writer appends (CSV: text of "
        "2^14 rows at a time; parquet: row groups of 65,536; Picasso, DECODE and SMAP: resizable HDF5 datasets "
        "appended 65,536 rows at a time; ShareLoc: rows streamed into the zip's DEFLATE, the manifest written at "
        "the end). Not streamed: a MATLAB v7 `_sml.mat` (scipy reads it whole), so decode_mem reads v7 files up "
        "to 256 MiB and says to save a larger one as v7.3; it writes v7.3 only.",
        "",
    ]
    out = RESULTS / f"{args.name}.md"
    out.write_text("\n".join(lines))
    (RESULTS / f"{args.name}.json").write_text(json.dumps({"rows": rows, "results": results, **info}, indent=1) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=100_000_000)
    p.add_argument("--smoke", action="store_true", help="10^6 rows (a check; report name tables_smoke)")
    p.add_argument("--workdir", default=None, help="folder for the files (default: a temporary one)")
    p.add_argument("--formats", default=",".join(ORDER))
    p.add_argument("--name", default=None, help="report name under results/ (default tables, tables_smoke)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    args.command = command_line(argv)
    if args.smoke:
        args.rows = 1_000_000
    args.name = args.name or ("tables_smoke" if args.smoke else "tables")
    import tempfile

    work = Path(args.workdir).resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="bench_tables_"))
    work.mkdir(parents=True, exist_ok=True)
    load0, at, t_start = load_average(), commit(), time.perf_counter()
    results: dict[str, dict] = {}
    for fmt in args.formats.split(","):
        path = work / f"table{SUFFIX[fmt]}"
        target = work / f"converted{SUFFIX[CONVERT_TO[fmt]]}"
        rec: dict[str, dict | None] = {}
        rec["write"] = run_child({"op": "write", "fmt": fmt, "path": str(path), "rows": args.rows})
        evict(path)
        rec["read"] = run_child({"op": "read", "fmt": fmt, "path": str(path), "rows": args.rows})
        evict(path)
        rec["convert"] = run_child({"op": "convert", "fmt": fmt, "path": str(path), "target": str(target),
                                    "rows": args.rows})
        for f in (*work.glob("table*"), *work.glob("converted*")):
            f.unlink()
        results[fmt] = rec
        print(f"{fmt}: " + ", ".join(f"{k} {v['rows'] / v['seconds'] / 1e6:.2f} M rows/s, "
                                     f"{v['peak_anon_kb'] / 1024:.0f} MiB" for k, v in rec.items()), flush=True)
    info = {"machine": machine_line(1, load_start=load0, at=at), "seconds": time.perf_counter() - t_start}
    print(f"-> {write_report(results, args, info)}")
    if not args.workdir:
        os.rmdir(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
