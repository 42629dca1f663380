"""The report's super-resolution panel before and after a change, on two simulated movies localized by ``infer``
with the shipped model: writes ``benchmarks/results/screenshots/report_panel_before_after.png`` and
``benchmarks/results/report_panel.md`` (the command, machine, commits and what each run printed).

    python benchmarks/report_panel.py [--before 570889d~1] [--after HEAD] [--work /tmp/report_panel]

The movies (``python -m decode_mem.simulate``): a sparse sCMOS-like field like the issue's real one (256 x 256 px of
160 nm = 41 x 41 µm, 20 frames, 0.05 emitters per µm² and frame: about 1 500 localizations) and filaments
(192 x 192 px of 100 nm, 400 frames). Each is localized by ``python -m decode_mem.infer`` of both commits (each
taken whole with ``git archive``, so that nothing uncommitted is shown), and the "Widefield and
super-resolution" figure of each ``report.html`` is put in one PNG: before above after.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import subprocess
import sys
from pathlib import Path

from command_line import command_line
from machine import checkout, load_average, machine_line

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "screenshots" / "report_panel_before_after.png"
REPORT = ROOT / "benchmarks" / "results" / "report_panel.md"
MOVIES = {  # name: (simulate flags, infer flags)
    "sparse sCMOS-like field, 41 x 41 µm": (
        ["--frames", "20", "--size", "256", "256", "--camera", "scmos", "--pixel_size", "160", "--density", "0.05",
         "--seed", "1"], ["--camera", "scmos", "--pixel_size", "160"]),
    "filaments, 19 x 19 µm": (
        ["--frames", "400", "--size", "192", "192", "--structure", "filaments", "--density", "0.6", "--seed", "2"],
        []),
}


def panel(report: Path) -> bytes:
    """The PNG of the report's "Widefield and super-resolution" section."""
    html = report.read_text()
    found = re.search(r'src="data:image/png;base64,([^"]+)"', html[html.index("Widefield and super-resolution"):])
    assert found, f"{report}: no super-resolution figure"
    return base64.b64decode(found.group(1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default="570889d~1", help="commit before the change (default: issue 72's render)")
    p.add_argument("--after", default="HEAD")
    p.add_argument("--work", default="/tmp/report_panel", help="scratch folder (movies, trees, runs)")
    args = p.parse_args(argv)
    work = Path(args.work).resolve()
    load0 = load_average()
    trees = {label: work / label for label in ("before", "after")}
    hashes = {label: checkout(rev, trees[label]) for label, rev in (("before", args.before), ("after", args.after))}
    pngs: list[tuple[str, bytes]] = []
    printed: list[str] = []
    for i, (name, (simulate, infer)) in enumerate(MOVIES.items()):
        movie = work / f"movie{i}.tif"
        env = {**os.environ, "PYTHONPATH": str(trees["after"])}
        # run from the scratch folder: ``python -m`` puts the current folder before PYTHONPATH
        subprocess.run([sys.executable, "-m", "decode_mem.simulate", *simulate, "--out", str(movie), "--quiet"],
                       check=True, env=env, cwd=work)
        for label in ("before", "after"):
            out = work / f"run{i}_{label}"
            env = {**os.environ, "PYTHONPATH": str(trees[label])}
            cmd = [sys.executable, "-m", "decode_mem.infer", str(movie), *infer, "--out", str(out)]
            run = subprocess.run(cmd, check=True, env=env, cwd=work, capture_output=True, text=True)
            lines = [line for line in run.stdout.splitlines() if line.startswith(f"movie{i}:")]
            shown = " ".join(["python -m decode_mem.infer", f"movie{i}.tif", *infer, "--out", "..."])
            printed.append(f"- {name}, {label} ({hashes[label]}): `{shown}` printed: "
                           f"{lines[-1] if lines else '(no stack line)'}")
            pngs.append((f"{name}: {label} ({hashes[label]})", panel(out / "report.html")))
    figure(pngs, f"made by {command_line(argv)}")
    md = ["# The report's super-resolution panel before and after", "",
          f"Command: `{command_line(argv)}`", "",
          f"Machine: {machine_line('torch default', load_start=load0, at=hashes['after'])}", "",
          f"Before: {args.before} = {hashes['before']}; after: {args.after} = {hashes['after']} (each from "
          "`git archive`). Simulated with the after commit's `decode_mem.simulate`:", ""]
    md += [f"- {name}: `python -m decode_mem.simulate {' '.join(flags)}`" for name, (flags, _) in MOVIES.items()]
    md += ["", *printed, "", "![before above after](screenshots/report_panel_before_after.png)"]
    REPORT.write_text("\n".join(md) + "\n")
    print(f"wrote {OUT} and {REPORT}")
    return 0


def figure(pngs: list[tuple[str, bytes]], footer: str) -> None:
    """The panels one above the other at their own size, each under its label."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.image import imread

    images = [(label, imread(io.BytesIO(data))) for label, data in pngs]
    width = max(img.shape[1] for _, img in images)
    heights = [img.shape[0] + 40 for _, img in images]
    dpi = 100
    fig = Figure(figsize=(width / dpi, (sum(heights) + 30) / dpi), dpi=dpi)
    FigureCanvasAgg(fig)
    top = sum(heights) + 30
    for label, img in images:
        top -= img.shape[0] + 40
        ax = fig.add_axes((0, top / (sum(heights) + 30), img.shape[1] / width, img.shape[0] / (sum(heights) + 30)))
        ax.imshow(img, interpolation="nearest")
        ax.set_axis_off()
        fig.text(0.01, (top + img.shape[0] + 12) / (sum(heights) + 30), label, fontsize=14, weight="bold")
    fig.text(0.01, 8 / (sum(heights) + 30), footer, fontsize=9, color="0.4")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=dpi)


if __name__ == "__main__":
    raise SystemExit(main())
