"""The quick start's ``report.html`` as a browser shows it: runs ``pipelines/quickstart.yaml`` (the full run, not
``--quick``), renders the report with headless Chromium and writes ``benchmarks/results/report_screenshot.png``
and ``report_screenshot.md`` (the command, the machine, the versions and what the run printed). With ``--real``:
the same for ``infer`` on the real camera movies in ``tests/data/real`` as a new user runs it (no flags), into
``benchmarks/results/screenshots/report_<movie>.png`` and ``report_real.md``.

    python benchmarks/report_screenshot.py [--out runs/quickstart_screenshot] [--threads N] [--real]

Needs Chromium (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from command_line import command_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
QUICKSTART = ROOT / "pipelines" / "quickstart.yaml"
WINDOW = (1280, 3000)  # CSS px: the whole quick-start report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/quickstart_screenshot", help="pipeline output folder (relative to the "
                                                                 "repository)")
    p.add_argument("--threads", type=int, help="torch CPU threads for the pipeline (default: the YAML's)")
    p.add_argument("--real", action="store_true", help="the real movies in tests/data/real instead of the quick start")
    args = p.parse_args(argv)
    os.chdir(ROOT)  # paths in the report relative to the repository, as a user who cloned it sees them
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI does (decode_mem.cli.run), before torch loads

    from decode_mem.pipeline import run_pipeline
    from decode_mem.report import collect_versions, find_chromium, screenshot

    chromium = find_chromium()
    if chromium is None:
        print("error: Chromium is not installed (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    if args.real:
        return real_movies(args.out, chromium, argv)
    pipeline_cmd = ["python", "-m", "decode_mem.pipeline", str(QUICKSTART.relative_to(ROOT)), "--out", args.out]
    if args.threads is not None:
        pipeline_cmd += ["--threads", str(args.threads)]
    lines: list[str] = []
    t0 = time.perf_counter()
    produced = run_pipeline(QUICKSTART.relative_to(ROOT), out=args.out, echo=lines.append,
                            overrides={"threads": args.threads} if args.threads is not None else None,
                            command=shlex.join(pipeline_cmd))
    wall = time.perf_counter() - t0
    png = screenshot(produced["report"], RESULTS / "report_screenshot.png", width=WINDOW[0], height=WINDOW[1],
                     chromium=chromium)
    version = subprocess.run([chromium, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    this_cmd = command_line(argv)
    md = [
        "# Screenshot of the quick start's report",
        "",
        "![report.html of the quick start](report_screenshot.png)",
        "",
        f"Made by `{this_cmd}`: it ran the quick start (`{shlex.join(pipeline_cmd)}`, {wall:.1f} s on this machine,"
        f" while other jobs may have been running) and rendered `{Path(produced['report']).name}` with headless "
        f"{version or chromium} at {WINDOW[0]} x {WINDOW[1]} CSS px "
        "(`decode_mem.report.screenshot`).",
        "",
        "## What the pipeline printed",
        "",
        "```",
        *[line for line in "\n".join(lines).splitlines()],
        "```",
        "",
        "## Machine and versions",
        "",
        "| | |",
        "| --- | --- |",
        *[f"| {k} | {v} |" for k, v in collect_versions()],
        "",
    ]
    (RESULTS / "report_screenshot.md").write_text("\n".join(md))
    print(f"wrote {png} and {RESULTS / 'report_screenshot.md'}")
    return 0


REAL = {"sample0": "tests/data/real/freetrace_sptpalm_ixon897/sample0.tiff",
        "images": "tests/data/real/locan_images/images.tif"}


def real_movies(out: str, chromium: str, argv: list[str] | None) -> int:
    """``infer`` on each real movie as a new user runs it (no camera flags), its report.html screenshotted."""
    from decode_mem.report import collect_versions, screenshot

    md = ["# Screenshots of report.html on real camera movies", "",
          f"Made by `{command_line(argv)}`: `python -m decode_mem.infer MOVIE --out OUT` on each movie (no flags, as a "
          "new user runs it), report.html rendered by headless Chromium at "
          f"{WINDOW[0]} x {WINDOW[1]} CSS px. The movies and their sources: tests/data/real/*/README.md.", ""]
    for stem, movie in REAL.items():
        folder = Path(out) / stem
        cmd = [sys.executable, "-m", "decode_mem.infer", movie, "--out", str(folder)]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        png = RESULTS / "screenshots" / f"report_{stem}.png"
        screenshot(folder / "report.html", png, width=WINDOW[0], height=WINDOW[1], chromium=chromium)
        md += [f"## {movie}", "", f"![report.html of {stem}](screenshots/{png.name})", "",
               f"`python -m decode_mem.infer {movie} --out {folder}`: exit {done.returncode}, {wall:.1f} s (the "
               "machine shared with other jobs). What it printed:", "", "```",
               *(done.stdout + done.stderr).strip().splitlines(), "```", ""]
    md += ["## Machine and versions", "", "| | |", "| --- | --- |", *[f"| {k} | {v} |" for k, v in collect_versions()],
           ""]
    (RESULTS / "report_real.md").write_text("\n".join(md))
    print(f"wrote {RESULTS / 'report_real.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
