"""Write ``benchmarks/README.md``: every script in ``benchmarks/``, what it measures, its reports, and the commit
and machine each report records (read from the report's own text, "not recorded" where it has none).

    python benchmarks/make_index.py            # rewrites benchmarks/README.md

What a script measures is its docstring's first sentence; which script made a report is the first
``python benchmarks/<script>.py`` its text names. Reports known to predate the code they describe are listed in
``STALE`` with the reason (a judgement, written here, not measured); a recorded commit that this repository's
history does not hold (made before a rebase) is found with git and said too.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"

# Reports that describe code which has changed since they were made; re-run them before quoting their numbers.
FASTER_SPLINE = ("`fit --psf` trains within a time budget, and its spline rendering is 1.5-3x faster since "
                 "3417376 (spline_render.md); a budget holds more steps now: rerun before quoting them")
SPREAD_CUMULANTS = ("the pixels' cumulants behind `fit --psf`'s matched density and photons come from frames spread "
                    "over the movie since the commit that added calibrate.cumulants.light_cumulants (consecutive "
                    "frames read them low: tests/calibrate/test_light_cumulants.py); rerun before quoting its "
                    "estimates and fits")
STALE: dict[str, str] = {name: f"{FASTER_SPLINE}; and {SPREAD_CUMULANTS}"
                         for name in ("3d.md", "3d_budget_check.md", "3d_crowding_check.md", "3d_schedule.md")}
STALE["crowding.md"] = SPREAD_CUMULANTS
# Helpers that measure nothing themselves: what they are for.
HELPERS = {"command_line.py", "machine.py", "picasso_runner.py", "plan_bytes.py", "report_files.py",
           "make_index.py"}
COMMIT = re.compile(r"decode_mem (?:at|commit) ([0-9a-f]{7,40})")
SCRIPT = re.compile(r"python (?:/\S*/)?benchmarks/(\w+)\.py")


def first_sentence(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    head = " ".join(doc.strip().split("\n\n")[0].split())
    return head.replace("``", "`")


def made_by(report: Path) -> str | None:
    found = SCRIPT.search(report.read_text())
    return f"{found.group(1)}.py" if found else None


def recorded_commit(text: str) -> str:
    found = COMMIT.search(text)
    if not found:
        return "not recorded"
    sha = found.group(1)
    known = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=ROOT, capture_output=True).returncode
    return f"`{sha}`" if known == 0 else f"`{sha}` (not in this history: made before a rebase)"


def recorded_machine(text: str) -> str:
    found = re.search(r"(?:Machine|Devices?): (?:cpu: )?([^;\n]*)", text)
    if not found:
        return "not recorded"
    words = found.group(1)
    words = re.split(r"\. |; |, \d+(?:\.\d+)? GiB RAM", words)[0]
    return words.strip().rstrip(".") or "not recorded"


def report_row(report: Path) -> str:
    text = report.read_text()
    name = report.name
    stale = f"**stale**: {STALE[name]}" if name in STALE else ""
    extras = " ".join(f"[{p.suffix[1:]}](results/{p.name})" for p in sorted(report.parent.glob(report.stem + ".*"))
                      if p.suffix in (".png", ".json"))
    return (f"| [{name}](results/{name}) {extras} | {recorded_commit(text)} | {recorded_machine(text)} | "
            f"{stale} |")


def index() -> str:
    reports = sorted(RESULTS.glob("*.md"))
    by_script: dict[str, list[Path]] = {}
    for report in reports:
        by_script.setdefault(made_by(report) or "", []).append(report)
    lines = [
        "# Benchmarks",
        "",
        "Every number the README and `docs/` quote comes from one of these reports. Each `bench_*.py` runs with "
        "one command (its docstring gives it, with a quicker smoke form) and writes `results/<name>.md` "
        "(+ `.png`/`.json`) with the exact command, the machine, the versions and only what that run measured. "
        "The commit and machine below are read from each report's own text (`python benchmarks/make_index.py` "
        "writes this page); a report marked **stale** predates the code it describes: re-run its script before "
        "quoting it.",
        "",
        "GPU rows say \"not measured\" where no GPU ran them; `bench_gpu.py` is the prepared GPU check.",
        "",
    ]
    for script in sorted(HERE.glob("*.py")):
        if script.name in HELPERS:
            continue
        lines += [f"## {script.name}", "", first_sentence(script), ""]
        made = by_script.get(script.name, [])
        if made:
            lines += ["| report | commit | machine | status |", "|---|---|---|---|"] + [report_row(r) for r in made]
        else:
            lines.append("No report in `results/` yet (not measured).")
        lines.append("")
    orphans = by_script.get("", [])
    if orphans:
        lines += ["## Reports that name no script", "", "| report | commit | machine | status |",
                  "|---|---|---|---|"] + [report_row(r) for r in orphans] + [""]
    lines += ["## Helpers", ""] + [f"- `{name}`: {first_sentence(HERE / name)}" for name in sorted(HELPERS)
                                    if (HERE / name).is_file()] + [""]
    return "\n".join(lines)


if __name__ == "__main__":
    (HERE / "README.md").write_text(index())
