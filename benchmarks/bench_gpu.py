"""The GPU check: one prepared command for the short runs a GPU is lent for (DESIGN §9).

    python benchmarks/bench_gpu.py                        # on a CUDA machine, < 8 min: benchmarks/results/gpu.md
    python benchmarks/bench_gpu.py --device cpu --quick   # the same script on a CPU: gpu_cpu_quick.md

Steps, in this order, each written to the report as soon as it is done (a run stopped by its time limit still
leaves a report, the steps not reached marked so):

1. **gpu tests**: ``pytest -m gpu`` on the files that hold them, its log beside the report (``*_tests.log``).
2. **Movies** simulated on the device: 256² (~600 emitters per frame) and 2048² (~40k).
3. **End to end vs network alone**: ``python -m decode_mem.infer MOVIE --out DIR --device D --format F`` for every
   output format (csv, picasso, parquet), each in a fresh process: the first run with an empty plan cache (what
   a new user pays), then the repeats with the sizes it remembered. Frames/s of the stack (``<stem>.json``'s
   ``frames_per_s``: from choosing the sizes to the files closed, the process's start-up and the report not
   included) and of the whole command, beside the network alone at the sizes the run chose
   (``footprint.speed.time_unit`` on the same unit of work in this process), and peak RssAnon of the command.
   Both run the model ``infer`` chooses on the device without ``--model`` (``model.choice``: the wide shipped
   model on a GPU, the small one on a CPU), given to ``infer`` as ``--model``.
4. **Device memory, predicted vs measured**: ``plan_inference``'s prediction of the network's working set beside
   ``peak_bytes`` of a real unit (CUDA: ``torch.cuda.max_memory_allocated``; a CPU: live tensor bytes), and
   ``<stem>.json``'s measured device peak of each end-to-end run beside its plan.
5. **Speed paths** (network alone, one unit): channels-last on/off, ``torch.compile`` (and its CUDA-graph mode
   ``reduce-overhead`` on CUDA), with the largest output difference from eager fp32 channels-last. They choose
   the CUDA defaults later; not run with ``--quick`` on a CPU except channels-last.
6. **Training** samples/s at batch 16 and 64 through the public ``decode_mem.train.fit`` on the device: the
   time between a warm-up step and the last step (simulation of the windows included, start-up and the first
   steps not).

Optional packages (zarr, dask, imagecodecs, matplotlib) may be missing on a lent machine: what needs them is
skipped and said so. Every number comes from the run that wrote the report.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from command_line import command_line
from machine import commit, machine_line

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("decode_mem") is None:  # a lent machine with the checkout, nothing installed: the
    sys.path.insert(0, str(ROOT))  # commands run from ROOT (``python -m``) find it there too
RESULTS = ROOT / "benchmarks" / "results"
FORMATS = ("csv", "picasso", "parquet")
THREAD_ARGS: list[str] = []  # ``--threads N`` for every command, where the check was given a thread count
FULL = {"256": 2000, "2048": 60, "train_steps": 60, "budget_s": 460}  # frames per movie, steps, seconds
QUICK = {"256": 40, "2048": 2, "train_steps": 8, "budget_s": 600}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="cuda (default where present) or cpu")
    p.add_argument("--quick", action="store_true", help="short movies and runs (a CPU in a few minutes)")
    p.add_argument("--out", default=None, help="report (default: results/gpu.md, or gpu_cpu_quick.md on a CPU)")
    p.add_argument("--budget_s", type=float, default=None, help="seconds for the whole check (default 460; "
                                                                "600 with --quick)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads, here and in every command (default: 1 on a CPU — two OpenMP threads "
                        "against other jobs on a busy machine ran a unit 12x slower than one —, torch's on CUDA)")
    p.add_argument("--report-only", action="store_true",
                   help="render the report again from its .json (no measurement)")
    args = p.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    threads = args.threads or (None if device.startswith("cuda") else 1)
    if threads:
        torch.set_num_threads(threads)
        THREAD_ARGS.extend(["--threads", str(threads)])
    sizes = QUICK if args.quick else FULL
    name = "gpu" if device.startswith("cuda") else f"gpu_{device}{'_quick' if args.quick else ''}"
    out = Path(args.out) if args.out else RESULTS / f"{name}.md"
    report = Report(out, device, args.quick, time.monotonic() + (args.budget_s or sizes["budget_s"]))
    if args.report_only:
        report.load(json.loads(out.with_suffix(".json").read_text()))
        report.write()
        return 0
    with tempfile.TemporaryDirectory(prefix="bench_gpu_") as tmp:
        work = Path(tmp)
        os.environ["DECODE_MEM_CACHE"] = str(work / "cache" / "throughput.json")  # a first run's empty cache
        for step in (run_gpu_tests, simulate_movies, end_to_end, memory_rows, speed_paths, training):
            if report.seconds_left() < 15:
                report.note(f"{step.__name__}: not run (time budget spent)")
                continue
            log(f"[{report.elapsed():.0f} s] {step.__name__}")
            try:
                step(report, work, sizes)
            except Exception as e:  # one failing step must not lose the others' numbers
                report.note(f"{step.__name__} failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            report.write()
        report.write()  # the steps not run for the budget are notes too: written after the last step
    log(f"done in {report.elapsed():.0f} s: {out}")
    return 0


def log(text: str) -> None:
    print(text, flush=True)


# --------------------------------------------------------------------------------------------- the report
class Report:
    """What has been measured so far; ``write()`` renders it (markdown + PNG) atomically, after every step."""

    def __init__(self, out: Path, device: str, quick: bool, deadline: float) -> None:
        self.out, self.device, self.quick, self.deadline = out, device, quick, deadline
        self.start = time.monotonic()
        self.commit = commit()
        self.command = command_line()
        self.model = "`{}` ({})".format(*_model_line(device))  # the model infer and the network alone run
        self.tests: dict = {}
        self.movies: dict[str, dict] = {}
        self.e2e: list[dict] = []
        self.memory: list[dict] = []
        self.paths: list[dict] = []
        self.train: list[dict] = []
        self.notes: list[str] = []

    def load(self, saved: dict) -> None:
        """The measurements of an earlier run (``--report-only``): its command, machine and duration too."""
        self.command, self._machine, self._minutes = saved["command"], saved["machine"], saved.get("minutes")
        self.model = saved.get("model", "not recorded")
        self.tests, self.movies, self.e2e = saved["tests"], saved["movies"], saved["end_to_end"]
        self.memory, self.paths, self.train, self.notes = (saved["memory"], saved["speed_paths"], saved["training"],
                                                           saved["notes"])

    def elapsed(self) -> float:
        if getattr(self, "_minutes", None) is not None:
            return 60 * self._minutes
        return time.monotonic() - self.start

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()

    def note(self, text: str) -> None:
        log(text)
        self.notes.append(text)

    def machine(self) -> str:
        if getattr(self, "_machine", None):
            return self._machine
        import torch

        gpu = None
        if self.device.startswith("cuda") and torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.device(self.device))
            gpu = f"{props.name}, {props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}"
        have = {m: importlib.util.find_spec(m) is not None for m in ("zarr", "dask", "imagecodecs", "matplotlib")}
        missing = [m for m, ok in have.items() if not ok]
        return (f"{machine_line(torch.get_num_threads(), at=self.commit, gpu=gpu)}; optional packages missing: "
                f"{', '.join(missing) or 'none'}")

    def write(self) -> None:
        from decode_mem.io.atomic import atomic_output

        self.out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(self.out) as tmp:
            tmp.write_text(self.markdown())
        with atomic_output(self.out.with_suffix(".json")) as tmp:
            tmp.write_text(json.dumps({"command": self.command, "machine": self.machine(),
                                       "minutes": round(self.elapsed() / 60, 2), "model": self.model,
                                       "tests": self.tests,
                                       "movies": self.movies, "end_to_end": self.e2e, "memory": self.memory,
                                       "speed_paths": self.paths, "training": self.train, "notes": self.notes},
                                      indent=1, default=str))
        try:
            _plot(self, self.out.with_suffix(".png"))
        except ImportError:
            self.notes.append("no PNG: matplotlib is missing") if "no PNG" not in " ".join(self.notes) else None

    def markdown(self) -> str:
        cuda = self.device.startswith("cuda")
        head = "GPU check" if cuda else f"GPU check, run on the CPU{' (--quick)' if self.quick else ''}"
        lines = [f"# {head}", "", f"Command: `{self.command}`; {self.elapsed() / 60:.1f} min so far."
                 if not self.done() else f"Command: `{self.command}`; {self.elapsed() / 60:.1f} min.",
                 f"Machine: {self.machine()}.", f"Model: {self.model}.",
                 f"Device: **{self.device}**" + ("" if cuda else
                 " — every GPU number below is **not measured** (no CUDA in this run); the rows show what "
                 "the script measures and that it runs."), "",
                 "Steps and methods: the docstring of `benchmarks/bench_gpu.py`. Every number comes from the run that "
                 "wrote this report.", ""]
        lines += ["## 1. gpu tests", ""]
        if self.tests:
            lines += [f"`{self.tests['command']}`: {self.tests['summary']} (exit {self.tests['rc']}; log: "
                      f"`{self.tests['log']}`)", ""]
        else:
            lines += ["not run", ""]
        lines += ["## 2. Movies (simulated on the device)", "",
                  "| movie | frames | emitters/frame | MB | simulate (s) |", "|---|---|---|---|---|"]
        for key, m in self.movies.items():
            lines.append(f"| {key} | {m['frames']} | {m['emitters_per_frame']:.0f} | {m['mb']:.0f} | "
                         f"{m['seconds']:.1f} |")
        lines += ["", "## 3. End to end vs network alone", "",
                  "| movie | format | run | stack frames/s | command frames/s | command wall (s) | network alone "
                  "frames/s (chosen sizes) | stack / network | MB/s (stack) | localizations/s (stack) | peak RssAnon "
                  "(MiB) | chunk × batch |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in self.e2e:
            lines.append(f"| {r['movie']} | {r['format']} | {r['run']} | {_f(r.get('loop_fps'))} | "
                         f"{_f(r.get('command_fps'))} | {_f(r.get('wall_s'))} | {_f(r.get('network_fps'))} | "
                         f"{_f(r.get('ratio'), 2)} | {_f(r.get('mb_per_s'))} | {_f(r.get('locs_per_s'), 0)} | "
                         f"{_f(r.get('peak_rss_anon_mib'), 0)} | {r.get('sizes', '')} |")
        lines += ["", "Goal (issue 34): stack frames/s ≥ 0.8 × the network alone at both sizes.", "",
                  "## 4. Device memory, predicted vs measured", "",
                  "| frame | chunk | batch | precision | predicted network (MiB) | measured peak (MiB) | error | "
                  "measured by |", "|---|---|---|---|---|---|---|---|"]
        for r in self.memory:
            lines.append(f"| {r['frame']} | {r['chunk']} | {r['batch']} | {r['amp']} | {_f(r['predicted_mib'])} | "
                         f"{_f(r['measured_mib'])} | {_pct(r)} | {r['by']} |")
        amp = next((r["plan"].get("amp") for r in self.e2e if r["movie"] == "256²" and r.get("plan")), "fp32")
        lines += ["", f"## 5. Speed paths (network alone, one unit of the chosen sizes at 256², {amp})", "",
                  "| path | frames/s | vs eager channels-last | largest output difference vs eager fp32 |",
                  "|---|---|---|---|"]
        for r in self.paths:
            lines.append(f"| {r['path']} | {_f(r.get('fps'))} | {_f(r.get('speedup'), 2)} | "
                         f"{r.get('diff', '')} |")
        lines += ["", "Defaults on CUDA (channels-last on, compile off, no CUDA graphs) stay until this table, "
                  "measured on a GPU, shows a path that pays.", "",
                  "## 6. Training (public `decode_mem.train.fit`, the generalist config: 37-40 px windows)", "",
                  "| batch | precision | steps timed | samples/s | steps/s |", "|---|---|---|---|---|"]
        for r in self.train:
            lines.append(f"| {r['batch']} | {r['amp']} | {r['steps']} | {_f(r.get('samples_per_s'))} | "
                         f"{_f(r.get('steps_per_s'), 2)} |")
        if self.notes:
            lines += ["", "## Notes", ""] + [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    def done(self) -> bool:
        return bool(self.train) or any("training" in n for n in self.notes)


def _f(value: float | None, digits: int = 1) -> str:
    """``digits`` decimals, or three significant figures for small numbers (0.0123 frames/s on a CPU)."""
    if value is None:
        return "—"
    return f"{value:.3g}" if 0 < abs(value) < 10 ** (1 - digits) * 100 and digits else f"{value:,.{digits}f}"


def _pct(row: dict) -> str:
    if not row.get("predicted_mib") or row.get("measured_mib") is None:
        return "—"
    return f"{row['predicted_mib'] / row['measured_mib'] - 1:+.0%}"


# ------------------------------------------------------------------------------------------------ steps
def run_gpu_tests(report: Report, work: Path, sizes: dict) -> None:
    """``pytest -m gpu`` on the files holding gpu tests (collecting only them: a machine without zarr still can)."""
    files = sorted({str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                    if "mark.gpu" in p.read_text()})
    # -v -rfE: each test's outcome on its own line as it finishes, so a run stopped by the time limit still
    # names what failed (the first GPU run's log held only "F......")
    cmd = [sys.executable, "-m", "pytest", "-v", "-rfE", "-p", "no:cacheprovider", "-m", "gpu", *files]
    log_path = report.out.with_name(report.out.stem + "_tests.log")
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                              timeout=max(30.0, min(150.0, report.seconds_left() - 300)))
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = f"{e.stdout or ''}{e.stderr or ''}\n(timed out)", 124
    log_path.write_text(f"$ {' '.join(cmd[1:])}\n{text}")
    summary = next((line.strip("= ") for line in reversed(text.splitlines()) if " in " in line and (
        "passed" in line or "skipped" in line or "failed" in line or "deselected" in line)), "no summary line")
    report.tests = {"command": "python -m pytest -m gpu " + " ".join(files), "summary": summary, "rc": rc,
                    "log": str(log_path.relative_to(ROOT)) if log_path.is_relative_to(ROOT) else str(log_path)}


def simulate_movies(report: Report, work: Path, sizes: dict) -> None:
    for side in ("256", "2048"):
        movie, gt = work / f"m{side}.tif", work / f"m{side}_gt.csv"
        cmd = [sys.executable, "-m", "decode_mem.simulate", "--frames", str(sizes[side]), "--size", side, side,
               "--density", "1.0", "--out", str(movie), "--gt", str(gt), "--device", report.device, "--seed", side,
               "--quiet", *THREAD_ARGS]
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, timeout=max(30.0, report.seconds_left()))
        seconds = time.perf_counter() - t0
        with open(gt) as fh:
            rows = sum(1 for _ in fh) - 1
        report.movies[f"{side}²"] = {"path": str(movie), "frames": sizes[side], "side": int(side),
                                     "emitters_per_frame": rows / sizes[side],
                                     "mb": movie.stat().st_size / 1e6, "seconds": seconds}
        report.write()


def end_to_end(report: Report, work: Path, sizes: dict) -> None:
    """Each movie: csv first (first run, empty cache), then every format with the remembered sizes."""
    runs = [("first", "csv")] + [("repeat", f) for f in FORMATS]
    for key, movie in report.movies.items():
        for run, fmt in runs:
            if report.seconds_left() < 60:
                report.note(f"end to end {key} {fmt} ({run}): not run (time budget spent)")
                continue
            out = work / f"out_{movie['side']}_{run}_{fmt}"
            cmd = [sys.executable, "-m", "decode_mem.infer", movie["path"], "--out", str(out), "--device",
                   report.device, "--model", str(device_model(report.device)[0]), "--format", fmt, "--quiet",
                   *THREAD_ARGS]
            row = {"movie": key, "format": fmt, "run": run}
            report.e2e.append(row)
            wall, peak, rc, err = _timed(cmd, timeout=max(30.0, report.seconds_left() - 30))
            row.update(wall_s=wall, peak_rss_anon_mib=peak, command_fps=movie["frames"] / wall if rc == 0 else None)
            if rc != 0:
                row["sizes"] = f"exit {rc}: {err.strip().splitlines()[-1][:120] if err.strip() else ''}"
                report.write()
                continue
            summary = json.loads((out / (Path(movie["path"]).stem + ".json")).read_text())
            plan = summary.get("sizes", {}).get("plan", {})
            loop_fps = summary.get("frames_per_s")
            row.update(loop_fps=loop_fps, locs_per_s=summary["localizations"] / summary["wall_s"],
                       mb_per_s=loop_fps * movie["side"] ** 2 * 2 / 1e6 if loop_fps else None,
                       sizes=f"{plan.get('chunk_size')} × {plan.get('batch_size')} ({plan.get('amp')})",
                       plan=plan, device_peak=summary.get("sizes", {}).get("measured_device"))
            if run == "repeat" and fmt == "csv":
                row["network_fps"] = _network_fps(report.device, plan, movie["frames"])
            else:  # the same sizes: the network figure of the repeat csv run, where there is one
                same = [r for r in report.e2e if r["movie"] == key and r.get("network_fps") and r.get("plan") and
                        r["plan"].get("chunk_size") == plan.get("chunk_size") and
                        r["plan"].get("batch_size") == plan.get("batch_size")]
                row["network_fps"] = same[0]["network_fps"] if same else None
            if row.get("network_fps") and loop_fps:
                row["ratio"] = loop_fps / row["network_fps"]
            report.write()
    for row in report.e2e:  # the first runs ran before their sizes' network figure was measured
        if row["run"] == "first" and row.get("loop_fps"):
            same = [r for r in report.e2e if r["movie"] == row["movie"] and r.get("network_fps")
                    and r.get("plan", {}).get("batch_size") == row.get("plan", {}).get("batch_size")
                    and r.get("plan", {}).get("chunk_size") == row.get("plan", {}).get("chunk_size")]
            if same:
                row["network_fps"] = same[0]["network_fps"]
                row["ratio"] = row["loop_fps"] / row["network_fps"]
        if row.get("device_peak"):
            d = row["device_peak"]
            report.memory.append({"frame": f"{row['movie']} (infer, {row['format']}, {row['run']})",
                                  "chunk": row["plan"].get("chunk_size"), "batch": row["plan"].get("batch_size"),
                                  "amp": row["plan"].get("amp"), "predicted_mib": d.get("predicted_mib"),
                                  "measured_mib": d.get("peak_above_start_mib"),
                                  "by": "max_memory_allocated over the stack, above the model"})


def _timed(cmd: list[str], timeout: float) -> tuple[float, float | None, int, str]:
    """(wall s, peak RssAnon MiB sampled every 10 ms, exit status, stderr) of a command."""
    from decode_mem.memory import ProcessPeak

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    watcher = ProcessPeak(proc)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        err = (err or "") + "\n(timed out)"
    peak = watcher.join()
    return time.perf_counter() - t0, peak or None, proc.returncode, err or ""


def device_model(device: str) -> tuple[Path, str]:
    """The model ``infer`` runs on ``device`` without ``--model`` (the wide shipped one on a GPU where it is
    shipped, the small one on a CPU) and why: the end-to-end runs and the network alone both use it."""
    import torch

    from decode_mem.model.choice import choose_model

    choice = choose_model(None, torch.device(device).type)
    return choice.path, choice.why


def _model_line(device: str) -> tuple[str, str]:
    path, why = device_model(device)
    return (str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)), why


def _load_net(device: str):
    import torch

    from decode_mem.model.checkpoint import load_model

    net = load_model(str(device_model(device)[0])).net.to(device).eval()
    return net.to(memory_format=torch.channels_last)


def _network_fps(device: str, plan: dict, frames: int) -> float | None:
    """The network alone at the sizes a run chose: ``time_unit`` on the same unit of work (remembered timings
    are not used: this one is measured now)."""
    import torch

    from decode_mem.footprint.inference import plan_inference
    from decode_mem.footprint.speed import frames_per_second, time_unit

    if not plan:
        return None
    net = _load_net(device)
    p = plan_inference(net, tuple(plan["frame_shape"]), chunk_size=plan["chunk_size"], batch_size=plan["batch_size"],
                       amp=plan["amp"], device=device, block=plan["block"], n_frames=frames, trace=False)
    return frames_per_second(p, time_unit(net, p, torch.device(device)))


def memory_rows(report: Report, work: Path, sizes: dict) -> None:
    """The planner's network working set beside a real unit's peak, a few sizes at 256² and 2048²."""
    import torch

    from decode_mem.footprint import peak_bytes, plan_inference
    from decode_mem.tiling import TileConfig, TiledExecutor

    dev = torch.device(report.device)
    cuda = dev.type == "cuda"
    amp = "bf16" if cuda else "off"
    net = _load_net(report.device)
    settings = [((256, 256), 256, 1), ((256, 256), 256, 8), ((2048, 2048), 512, 1), ((2048, 2048), 1024, 2)]
    if cuda and not report.quick:
        settings += [((256, 256), 256, 32), ((2048, 2048), 2048, 1)]
    for shape, chunk, batch in settings:
        if report.seconds_left() < 40:
            report.note("memory rows: the rest not run (time budget spent)")
            break
        plan = plan_inference(net, shape, chunk_size=chunk, batch_size=batch, amp=amp, device=dev, block=batch)
        config = TileConfig(chunk_size=chunk, batch_size=batch, block=batch, amp=plan.amp, margin=plan.margin)
        measured = peak_bytes(TiledExecutor(net, shape, config, device=dev).run_unit, dev)
        report.memory.append({"frame": f"{shape[0]}²", "chunk": chunk, "batch": batch, "amp": plan.amp,
                              "predicted_mib": (plan.network_bytes or 0) / 2**20, "measured_mib": measured / 2**20,
                              "by": "torch.cuda.max_memory_allocated" if cuda else "live tensor bytes (CPU)"})
        report.write()


def speed_paths(report: Report, work: Path, sizes: dict) -> None:
    """One unit of 256² at the sizes the repeat run chose, through each path; outputs compared with eager fp32."""
    import torch

    from decode_mem.tiling import TileConfig, TiledExecutor

    dev = torch.device(report.device)
    cuda = dev.type == "cuda"
    chosen = next((r["plan"] for r in report.e2e if r["movie"] == "256²" and r.get("plan")), None)
    chunk, batch, amp = (chosen["chunk_size"], chosen["batch_size"], chosen["amp"]) if chosen else (256, 4, "off")
    net = _load_net(report.device)
    plain = copy.deepcopy(net).to(memory_format=torch.contiguous_format)
    paths = [("eager, channels-last (default)", net, {}), ("eager, contiguous", plain, {"channels_last": False})]
    if cuda or not report.quick:
        paths += [("torch.compile", net, {"compile": True})]
    if cuda:
        paths += [("torch.compile reduce-overhead (CUDA graphs)", net, {"compile": "reduce-overhead"})]
    else:
        report.note("speed paths: CUDA graphs not measured (no CUDA)" + ("; torch.compile not measured with --quick"
                                                                       if report.quick else ""))
    shape = (256, 256)
    data = None
    ref = None
    base_fps = None
    for label, model, extra in paths:
        if report.seconds_left() < 45:
            report.note(f"speed path {label}: not run (time budget spent)")
            continue
        row = {"path": label}
        report.paths.append(row)
        try:
            config = TileConfig(chunk_size=chunk, batch_size=batch, amp=amp, margin=2, **extra)
            ex = TiledExecutor(model, shape, config, device=dev)
            if data is None:
                g = ex._group(batch)
                data = 50 + 200 * torch.rand((g, batch + 2, *ex.grid.tile_shape), device=dev)
                fp32 = TiledExecutor(net, shape, replace(config, amp="off"), device=dev).unit(batch, data=data)
                ref = fp32().float().clone()
            unit = ex.unit(batch, data=data)
            out = unit().float().clone()  # the first call compiles / autotunes
            row["fps"] = _unit_fps(unit, dev, batch, ex)
            scale = ref.abs().amax(dim=tuple(i for i in range(ref.ndim) if i != ref.ndim - 3), keepdim=True)
            row["diff"] = f"{float(((out - ref).abs() / scale.clamp_min(1e-6)).max()):.2e} of the channel's scale"
            base_fps = base_fps or row["fps"]
            row["speedup"] = row["fps"] / base_fps
        except Exception as e:  # e.g. no compiler on the machine: said, not fatal
            row["diff"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
        report.write()


def _unit_fps(unit, device, batch: int, ex) -> float:
    import torch

    for _ in range(2):
        unit()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0, n = time.perf_counter(), 0
    while n < 3 or time.perf_counter() - t0 < 0.5:
        unit()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        n += 1
    seconds = (time.perf_counter() - t0) / n
    return batch * ex._group(batch) / len(ex.grid) / seconds


def training(report: Report, work: Path, sizes: dict) -> None:
    """``fit`` on the device at batch 16 and 64, one micro-batch per step; samples/s between step 2 and the last."""
    import torch

    from decode_mem.model.precision import dtype_name, resolve_amp
    from decode_mem.train import fit, load_train_config

    base = load_train_config(str(ROOT / "pipelines" / "train_generalist_2d.yaml"))
    for batch in (16, 64):
        if report.seconds_left() < 45:
            report.note(f"training batch {batch}: not run (time budget spent)")
            continue
        stamps: list[float] = []
        steps = sizes["train_steps"]
        cfg = replace(base, out=str(work / f"train_{batch}"), steps=steps, batch_size=batch, accumulation_steps=1,
                      val_every=10**9, val_size=16, checkpoint_every=10**9, log_every=10**9, device=report.device,
                      quiet=True, memory_tracking=False, max_minutes=max(0.5, (report.seconds_left() - 30) / 60))
        fit(cfg, on_step=lambda step, row, stamps=stamps: stamps.append(time.perf_counter()))
        timed = len(stamps) - 2
        amp = dtype_name(resolve_amp(cfg.amp, torch.device(report.device))) or "fp32"
        row = {"batch": batch, "amp": f"{amp} ({cfg.amp})", "steps": timed}
        if timed >= 1:
            seconds = stamps[-1] - stamps[1]
            row.update(samples_per_s=timed * batch / seconds, steps_per_s=timed / seconds)
        report.train.append(row)
        report.write()


# ------------------------------------------------------------------------------------------------- plot
def _plot(report: Report, path: Path) -> None:
    from matplotlib.figure import Figure

    from decode_mem.io.atomic import atomic_output

    fig = Figure(figsize=(11, 4))
    ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1]})
    rows = [r for r in report.e2e if r.get("loop_fps")]
    labels = [f"{r['movie']}\n{r['format']} {r['run']}" for r in rows]
    x = list(range(len(rows)))
    ax.bar([i - 0.2 for i in x], [r["loop_fps"] for r in rows], 0.4, label="infer, the stack")
    ax.bar([i + 0.2 for i in x], [r.get("network_fps") or 0 for r in rows], 0.4, label="network alone")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("frames/s")
    ax.set_title(f"end to end vs network alone ({report.device})")
    ax.legend()
    ax2.bar([str(r["batch"]) for r in report.train], [r.get("samples_per_s") or 0 for r in report.train])
    ax2.set_xlabel("batch")
    ax2.set_ylabel("samples/s")
    ax2.set_title("training")
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)


if __name__ == "__main__":
    sys.exit(main())
