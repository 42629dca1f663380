"""Every reader fuzzed: ten thousand and more seeded mutations of real seed files, each read in a child process with a
memory limit and a time limit, and the outcomes counted per reader (a read, one decode_mem error naming the file, or
a defect: another exception, a bad read, a hang, a crash, out of memory).

    python benchmarks/bench_fuzz.py --commit HEAD --against 5433558   # 10 000 cases on HEAD and on the commit
                                                                       # before issue 73: results/fuzz.md (+ .json)
    python benchmarks/bench_fuzz.py --cases 300 --out /tmp/fuzz_smoke.md   # smoke: the working tree, ~1 min

The harness is ``tests/fuzz_readers.py`` (the suite's ``tests/io/test_fuzz_readers.py`` runs a few hundred of the
same cases): its ``READERS`` table lists every reader with its seeds (written by decode_mem's own writers, tifffile,
zarr and the vendors' libraries, or the real samples in ``tests/data/vendor``) and mutations; a case is a reader, a
seed and a number that draws 1 to 3 mutations. Cases are spread evenly over the readers and numbered from
``--first``, so that a run's cases are the same on every machine and every commit. ``--commit`` measures a
commit's tree (``git archive``: committed files only; default: the working tree), ``--against`` runs the same cases
on another commit too and reports both side by side. Each case runs in a child forked from a server that imported
the readers once, with ``--memory_mib`` MiB of address space beyond the server's (``RLIMIT_AS``) and
``--time_limit`` seconds; ``--jobs`` children at a time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from command_line import command_line  # noqa: E402
from machine import checkout, cpu_name, load_average  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
EXAMPLES = 3  # example cases listed per kind of defect


def working_tree() -> str:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "decode_mem"], capture_output=True,
                           text=True).stdout.strip()
    return f"{head} + uncommitted changes" if dirty else head


def run(label: str, root: Path | None, cases: list, seeds: dict, workdir: Path, args: argparse.Namespace) -> dict:
    import fuzz_readers as fr

    done = [0]
    start = time.monotonic()

    def progress(result) -> None:
        done[0] += 1
        if done[0] % 500 == 0:
            print(f"{label}: {done[0]}/{len(cases)} cases, {time.monotonic() - start:.0f} s", flush=True)

    results = fr.run_cases(cases, seeds, workdir / label, jobs=args.jobs, time_limit=args.time_limit,
                           memory_mib=args.memory_mib, decode_mem_root=root, on_result=progress)
    wall = time.monotonic() - start
    return {"label": label, "wall_s": round(wall, 1),
            "results": [{"id": r.case.id, "reader": r.case.reader, "seed": r.case.seed, "number": r.case.number,
                         "mutations": [list(m) for m in r.case.mutations], "did": r.mutations, "outcome": r.outcome,
                         "seconds": round(r.seconds, 3), "message": r.message, "where": r.where,
                         "peak_mib": None if r.peak_mib is None else round(r.peak_mib, 1)} for r in results]}


def table(runs: list[dict]) -> list[str]:
    """Outcome counts per reader; with two runs each cell is ``before -> after`` (n/a: the commit lacks the reader)."""
    import fuzz_readers as fr

    readers = list(dict.fromkeys(r["reader"] for r in runs[-1]["results"]))
    head = ["reader", *("cases", *fr.OUTCOMES)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    totals = [Counter() for _ in runs]

    def cell(counts: list[Counter], what: str, bold: bool = False) -> str:
        text = " -> ".join("n/a" if not c else str(sum(c.values()) if what == "cases" else c[what]) for c in counts)
        return f"**{text}**" if bold else text

    for reader in readers:
        counts = [Counter(r["outcome"] for r in run["results"] if r["reader"] == reader) for run in runs]
        for total, c in zip(totals, counts, strict=True):
            total.update(c)
        lines.append("| " + " | ".join([reader, *(cell(counts, w) for w in ("cases", *fr.OUTCOMES))]) + " |")
    lines.append("| " + " | ".join(["**all**", *(cell(totals, w, True) for w in ("cases", *fr.OUTCOMES))]) + " |")
    return lines


def defects(run: dict) -> list[str]:
    """The run's defects grouped by reader, outcome and where they were raised, each with examples."""
    import fuzz_readers as fr

    groups: dict[tuple, list[dict]] = {}
    for r in run["results"]:
        if r["outcome"] in fr.CLEAN:
            continue
        kind = r["message"].split(":")[0] if r["outcome"] in ("unclean", "oom") else r["outcome"]
        groups.setdefault((r["reader"], r["outcome"], kind, r["where"].split(" <- ")[0]), []).append(r)
    if not groups:
        return ["None."]
    lines = ["| reader | outcome | what | where | cases | example (case: mutations -> message) |",
             "|---|---|---|---|---|---|"]
    for (reader, outcome, kind, where), found in sorted(groups.items(), key=lambda g: (g[0][0], -len(g[1]))):
        ex = "<br>".join(f"`{r['id']}`: {'; '.join(r['did'])[:160]} -> {r['message'][:160]}".replace("|", "/")
                         .replace("\n", " ") for r in found[:EXAMPLES])
        lines.append(f"| {reader} | {outcome} | {kind} | {where or '-'} | {len(found)} | {ex} |")
    return lines


def slowest(run: dict) -> str:
    import fuzz_readers as fr

    every = max(run["results"], key=lambda r: r["seconds"])
    clean = [r for r in run["results"] if r["outcome"] in fr.CLEAN]
    text = f"slowest case {every['seconds']:.2f} s (`{every['id']}`, {every['outcome']})"
    if clean:
        c = max(clean, key=lambda r: r["seconds"])
        median = sorted(r["seconds"] for r in run["results"])[len(run["results"]) // 2]
        text += f"; slowest clean case {c['seconds']:.2f} s (`{c['id']}`, {c['outcome']}); median {median:.2f} s"
    return text


def report(runs: list[dict], args: argparse.Namespace, machine: str, commits: dict[str, str]) -> str:
    import fuzz_readers as fr

    n = len(runs[-1]["results"])
    lines = ["# Every reader fuzzed", "",
             f"Command: `{command_line()}`", "",
             f"Machine: {machine}", "",
             "Measured: " + "; ".join(f"**{label}**: decode_mem at {c}" for label, c in commits.items()) + ".", "",
             f"{n} cases over {len(set(r['reader'] for r in runs[-1]['results']))} readers (numbers "
             f"{args.first}..{args.first + n // len(set(r['reader'] for r in runs[-1]['results'])) - 1} of each), "
             f"each in a child process with {args.memory_mib} MiB of address space beyond the fork server's and "
             f"{args.time_limit:g} s; {args.jobs} at a time. Outcomes (`tests/fuzz_readers.py`): **read** (read whole, "
             "its checks passed), **error** (one decode_mem error, one line naming the file): clean; **unnamed** (a "
             "decode_mem error without the file's name or on several lines), **unclean** (another exception), "
             "**bad read** (non-finite pixels, repairs beyond the damage budget, non-finite or out-of-range "
             "localizations, a nonsense metadata value), **hang** (past the time limit), **crash** (a signal), "
             "**oom** (past the memory limit), **harness** (the case could not be built): defects.", ""]
    for run in runs:
        bad = sum(1 for r in run["results"] if r["outcome"] not in fr.CLEAN)
        absent = sorted(set(r["reader"] for r in runs[-1]["results"]) - set(r["reader"] for r in run["results"]))
        lines.append(f"- **{run['label']}**: {bad} defect(s) in {len(run['results'])} cases; {slowest(run)}; "
                     f"{run['wall_s']:.0f} s wall" + (f"; readers that commit does not have: {', '.join(absent)}"
                                                       if absent else "") + ".")
    lines += ["", "## Outcomes per reader", "", *(["Each cell: before -> after."] if len(runs) > 1 else []), "",
              *table(runs), ""]
    for run in runs:
        lines += [f"## Defects ({run['label']})", "", *defects(run), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=10_000, help="cases in all (at least), spread evenly over the readers")
    p.add_argument("--first", type=int, default=0, help="number of each reader's first case")
    p.add_argument("--readers", default="", help="comma-separated reader names (default: every available one)")
    p.add_argument("--commit", default="", help="measure this commit's tree (default: the working tree)")
    p.add_argument("--against", default="", help="also run the same cases on this commit")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--time_limit", type=float, default=10.0, help="seconds a case may run (past it: a hang)")
    p.add_argument("--memory_mib", type=int, default=1024, help="address space a case may add, MiB")
    p.add_argument("--workdir", type=Path, default=ROOT / "benchmarks" / "scratch" / "fuzz")
    p.add_argument("--out", type=Path, default=RESULTS / "fuzz.md")
    args = p.parse_args(argv)

    import shutil

    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    load_start = load_average()
    roots: dict[str, Path | None] = {}
    commits: dict[str, str] = {}
    if args.commit:
        commits["after"] = checkout(args.commit, args.workdir / "after")
        roots["after"] = args.workdir / "after"
    else:
        commits["after"] = working_tree()
        roots["after"] = None
    if args.against:
        commits["before"] = checkout(args.against, args.workdir / "before")
        roots["before"] = args.workdir / "before"
    if roots["after"] is not None:
        sys.path.insert(0, str(roots["after"]))  # the seeds are written by the measured commit's writers
    import fuzz_readers as fr

    readers = [r for r in args.readers.split(",") if r] or None
    seeds = fr.build_seeds(args.workdir / "seeds", readers)
    per_reader = max(1, -(-args.cases // len(seeds)))  # at least --cases in all
    cases = fr.draw_cases(per_reader * len(seeds), seeds=seeds, first=args.first)
    print(f"{len(cases)} cases over {len(seeds)} readers", flush=True)
    runs = []
    for label in (["before"] if args.against else []) + ["after"]:
        root = roots[label] or ROOT
        mine = [c for c in cases if fr.READERS[c.reader].in_tree(root)]  # an older commit lacks newer readers
        runs.append(run(label if args.against else "this run", roots[label], mine, seeds, args.workdir, args))
    machine = (f"{cpu_name()}; 1-min load average {load_start:.2f} at the start, {load_average():.2f} at the end; "
               f"python {sys.version.split()[0]}")
    if not args.against:
        commits = {"this run": commits["after"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(runs, args, machine, commits))
    args.out.with_suffix(".json").write_text(json.dumps({"commits": commits, "machine": machine,
                                                         "command": command_line(), "runs": runs}))
    print(f"wrote {args.out}", flush=True)
    shutil.rmtree(args.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
