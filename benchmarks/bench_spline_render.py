"""Spline PSF rendering on a CPU: the fused kernel (torch.compile's gather and product in one loop) against the
two-step path (gather, then a batched product), per call, as training renders its batches.

    python benchmarks/bench_spline_render.py            # ~2 min: writes benchmarks/results/spline_render.md + .json

A 3-D astigmatic pupil PSF (``simulate.pupil.pupil_spline``, 100 nm pixels, ±700 nm) as a spline; its emitters at
random sub-pixel positions and z, with and without a per-emitter width (what ``psf_sigma_jitter`` makes training
render); ``SplinePSF.patches`` and ``SplinePSF.render_spots`` (training's call: patches added into 16 frames of 64²
px, in chunks) timed with ``fused`` False and True, each the least of ``--repeats`` calls after a first one (the
fused kernel's first call compiles: timed apart). The largest difference between the two paths'
patches is reported beside the patches' largest value.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FRAMES = 16  # render_spots' canvas: frames of 64² px the emitters fall in


def measure(args: argparse.Namespace) -> dict:
    import torch

    from decode_mem.simulate.config import PupilConfig
    from decode_mem.simulate.pupil import pupil_spline
    from decode_mem.simulate.spline import SplinePSF

    torch.set_num_threads(args.threads)
    psf = SplinePSF(pupil_spline(PupilConfig(), (-700.0, 700.0), 100.0))
    size = psf.patch_size
    rows = [row for n in (int(v) for v in args.emitters.split(",")) for row in emitter_rows(psf, n, args.repeats)]
    return {"patch_size": size, "threads": args.threads, "rows": rows}


def emitter_rows(psf, n: int, repeats: int) -> list[dict]:
    """The rows of ``n`` emitters: each call and each kind of monomials, unfused and fused."""
    import torch

    rows = []
    g = torch.Generator().manual_seed(n)
    x, y = torch.rand(n, generator=g) * 60, torch.rand(n, generator=g) * 60
    z = (torch.rand(n, generator=g) - 0.5) * 1400
    width = 1 + 0.1 * torch.randn(n, generator=g)
    frame = torch.randint(0, FRAMES, (n,), generator=g)
    photons = torch.full((n,), 1000.0)

    def patches(w, fused):
        return psf.patches(x, y, z, psf.patch_size, w, fused=fused)[0]

    def render_spots(w, fused):  # training's call: a batch of frames, chunked inside
        return psf.render_spots(torch.zeros(FRAMES, 64, 64), frame, x, y, z, photons, w, fused=fused)

    for call_name, call in (("patches", patches), ("render_spots", render_spots)):
        for label, w in (("one width", None), ("a width per emitter", width)):
            row = {"emitters": n, "pixels": n * psf.patch_size ** 2, "call": call_name, "path": label}
            out = {}
            for fused in (False, True):
                t = time.perf_counter()
                out[fused] = call(w, fused)
                first = time.perf_counter() - t
                best = min(_timed(functools.partial(call, w, fused)) for _ in range(repeats))
                row["fused" if fused else "unfused"] = {"first_s": first, "best_s": best}
            row["max_difference"] = float((out[True] - out[False]).abs().max())
            row["max_value"] = float(out[False].abs().max())
            row["speedup"] = row["unfused"]["best_s"] / row["fused"]["best_s"]
            rows.append(row)
            print(f"{n} emitters, {call_name}, {label}: unfused {row['unfused']['best_s'] * 1e3:.1f} ms, fused "
                  f"{row['fused']['best_s'] * 1e3:.1f} ms ({row['speedup']:.1f}x)", flush=True)
    return rows


def _timed(call) -> float:
    t = time.perf_counter()
    call()
    return time.perf_counter() - t


def report(rec: dict, out: Path) -> None:
    from decode_mem.io.atomic import atomic_output

    lines = ["# Spline PSF rendering: fused kernel vs two steps (CPU)", "",
             f"`{rec['command']}`, {rec['minutes']:.1f} min", "", f"Machine: {rec['machine']}", "",
             __doc__.split("\n\n", 2)[2].strip(), "",
             f"Patch {rec['patch_size']}×{rec['patch_size']} px; {rec['threads']} torch thread(s).", "",
             "| call | emitters | pixels | monomials | unfused ms | fused ms | speed-up | fused first call s "
             "(compiling) | largest difference / largest value |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rec["rows"]:
        lines.append(f"| {r.get('call', 'patches')} | {r['emitters']} | {r['pixels']} | {r['path']} | "
                     f"{r['unfused']['best_s'] * 1e3:.1f} "
                     f"| {r['fused']['best_s'] * 1e3:.1f} | {r['speedup']:.1f}x | {r['fused']['first_s']:.2f} "
                     f"| {r['max_difference']:.1e} / {r['max_value']:.3g} |")
    with atomic_output(out) as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    with atomic_output(out.with_suffix(".json")) as tmp:
        tmp.write_text(json.dumps(rec, indent=1))
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--emitters", default="1000,4000,16000", help="emitters per call, comma-separated")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (training's background default: 1)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(RESULTS / "spline_render.md"))
    args = ap.parse_args()
    from command_line import command_line
    from machine import commit, load_average, machine_line

    at, load0, t0 = commit(), load_average(), time.perf_counter()
    rec = measure(args)
    rec["command"] = command_line()
    rec["minutes"] = (time.perf_counter() - t0) / 60
    rec["machine"] = machine_line(args.threads, load_start=load0, at=at)
    report(rec, Path(args.out))


if __name__ == "__main__":
    main()
