"""The library against the command line on the quick start's stack, on an idle and on a loaded machine.

    python benchmarks/bench_library_speed.py              # ~3-6 min on 2 cores
    python benchmarks/bench_library_speed.py --cap 60 --out /tmp/library_speed.md     # shorter

The quick start's stack (200 frames of 96 x 96 px, ``pipelines/quickstart.yaml``'s simulation) is made once by
``python -m decode_mem.pipeline pipelines/quickstart.yaml --out TMP``. Then each way of localizing it runs in a
fresh Python process whose environment has no ``OMP_WAIT_POLICY`` (a new user's shell), first on the machine as
it is, then beside one busy-loop process per core (``python -c 'while True: pass'``):

- ``CLI``: ``python -m decode_mem.infer stack.tif --out DIR --quiet``;
- ``predict_stack`` and ``run_inference`` after ``import decode_mem`` (the README's Library section);
- ``predict_stack, torch imported first``: ``import torch`` before decode_mem, as a notebook may (OpenMP's wait
  policy is then fixed before decode_mem could choose it; ``decode_mem.threads`` picks the thread count);
- ``before: torch first, all threads``: the same with ``threads=torch.get_num_threads()``, i.e. what every
  library call did before ``decode_mem.threads`` (idle threads spinning, as many as cores). Stopped after
  ``--cap`` seconds.

Times are the process's wall time (start-up and imports included) and, for library rows, the call alone.
Writes benchmarks/results/library_speed.md.
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

from command_line import command_line
from machine import commit, load_average, machine_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"

CHILD = {
    "predict_stack": "import decode_mem as dm",
    "run_inference": "import decode_mem as dm",
    "predict_stack, torch imported first": "import torch\nimport decode_mem as dm",
    "before: torch first, all threads": "import torch\nimport decode_mem as dm",
}
PREDICT = ("with dm.open_stack(STACK) as s:\n    n = sum(len(t) for t in dm.predict_stack(s, dm.load_model(){}, "
           "on_block=lambda r: seen.append(_t.get_num_threads())))")
BODY = {
    "predict_stack": PREDICT.format(""),
    "run_inference": "from decode_mem.infer.observe import InferObserver\n"
                     "class Obs(InferObserver):\n"
                     "    def block_done(self, *a):\n        seen.append(_t.get_num_threads())\n"
                     "r = dm.run_inference(dm.InferConfig(inputs=(STACK,), out=OUT, report=False), Obs())\n"
                     "n = sum(x.localizations for x in r.stacks)",
    "predict_stack, torch imported first": PREDICT.format(""),
    "before: torch first, all threads": PREDICT.format(", threads=torch.get_num_threads()"),
}


def child_script(name: str, stack: Path, out: Path) -> str:
    return "\n".join([
        "import json, time", CHILD[name], f"STACK, OUT = {str(stack)!r}, {str(out)!r}", "import torch as _t",
        "seen = []",
        "t0 = time.perf_counter()", BODY[name], "call = time.perf_counter() - t0",
        "import decode_mem.threads as th",
        "print(json.dumps({'n': n, 'call_s': call, 'passive': th.WAITS_PASSIVELY, 'threads': max(seen)}))",
    ])


def run_one(name: str, stack: Path, work: Path, cap: float) -> dict:
    out = Path(tempfile.mkdtemp(dir=work))
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if name == "CLI":
        cmd = [sys.executable, "-m", "decode_mem.infer", str(stack), "--out", str(out), "--quiet"]
    else:
        cmd = [sys.executable, "-c", child_script(name, stack, out)]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=cap, check=False)
    except subprocess.TimeoutExpired:
        return {"name": name, "wall_s": None, "load": load}
    wall = time.perf_counter() - t0
    if done.returncode:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    row = {"name": name, "wall_s": wall, "load": load}
    if name == "CLI":
        summary = json.loads((out / "stack.json").read_text())
        row.update(n=summary["localizations"], call_s=None)
    else:
        row.update(json.loads(done.stdout.strip().splitlines()[-1]))
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cap", type=float, default=180.0, help="seconds after which a run is stopped (default 180)")
    p.add_argument("--out", type=Path, default=RESULTS / "library_speed.md")
    a = p.parse_args()
    at, load_start = commit(), load_average()
    names = ["CLI", *CHILD]
    rows: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "decode_mem.pipeline", str(ROOT / "pipelines" / "quickstart.yaml"),
                        "--out", str(work / "qs"), "--quiet"], check=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
        stack = work / "qs" / "stack.tif"
        rows["as it is"] = [run_one(n, stack, work, a.cap) for n in names]
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
        try:
            time.sleep(2)
            rows["loaded"] = [run_one(n, stack, work, a.cap) for n in names]
        finally:
            for proc in busy:
                proc.kill()
                proc.wait()
    import torch

    machine = machine_line(f"torch's default {torch.get_num_threads()} threads", load_start=load_start, at=at)
    lines = ["# The library against the command line (quick start's stack)", "",
             f"`{command_line()}`", "", f"Machine: {machine}.", "",
             "Each row is a fresh process without `OMP_WAIT_POLICY` in its environment (see the script's "
             "docstring). *loaded*: beside one busy-loop process per core. Process: wall time of the whole process "
             "(start-up, imports and model loading included); call: the library call alone. Threads: torch's "
             "thread count while the blocks ran; passive: whether torch's OpenMP threads sleep when idle "
             "(`decode_mem.threads.WAITS_PASSIVELY`). The 1-min load average before each run says what else ran "
             "(this machine is shared).", "",
             "| machine | how | process [s] | call [s] | localizations | threads | passive | load before |",
             "|---|---|---|---|---|---|---|---|"]
    for state, rs in rows.items():
        for r in rs:
            if r["wall_s"] is None:
                lines.append(f"| {state} | {r['name']} | > {a.cap:.0f} (stopped) | | | | | {r['load']:.2f} |")
                continue
            call = "" if r.get("call_s") is None else f"{r['call_s']:.1f}"
            threads = "" if r.get("threads") is None else str(r["threads"])
            passive = "" if r.get("passive") is None else ("yes" if r["passive"] else "no")
            lines.append(f"| {state} | {r['name']} | {r['wall_s']:.1f} | {call} | {r['n']} | {threads} | {passive} "
                         f"| {r['load']:.2f} |")
    lines.append("")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
