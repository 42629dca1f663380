"""A specialist per physics variant, trained until its held-out validation stops improving, and ``fit``'s gap to it.

    python benchmarks/bench_specialist.py     # writes benchmarks/results/specialist.md + .png + .json
    python benchmarks/bench_specialist.py --report-only   # the same rows, the gap to a newer fit.json

Issue 13 asks ``fit`` to come within 0.02 Jaccard of a specialist trained to convergence on the true physics.
Here the specialist is the shipped generalist fine-tuned on the variant's *true* physics (the simulation that made
the test movie, on the 40 px training windows ``fit`` uses; a bleaching background becomes the range of levels the
movie goes through), with ``fit``'s learning rate decayed by ``--lr-gamma`` every ``--lr-step`` steps. It is
validated every ``--val-every`` steps on ``--val-windows`` held-out windows of the true physics; it has converged
when the validation loss has not fallen by more than ``--min-delta`` × |best loss| for ``--patience``
validations in a row. A run that reaches ``--cap-minutes`` first is reported as *not converged* (its Jaccard is
then a lower bound on the specialist's). The validation with the lowest loss gives the specialist, which then
localizes the same test movie as ``bench_fit.py`` (same variant, seed and frames); the gap to ``fit`` is computed
from ``fit.json`` (``bench_fit.py``'s rows) when it measured the same movies. Matching within 250 nm, optimal.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_fit import DEFAULT_VARIANTS, write_record
from bench_generalize import VARIANTS, run_decode, simulation
from command_line import command_line
from machine import commit, load_average, machine_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
GOAL_GAP = 0.02


def specialist_physics(sim):
    """The variant's simulation on ``fit``'s training windows; a bleaching background as its range of levels."""
    from decode_mem.calibrate.match import TRAIN_FRAME
    from decode_mem.simulate.config import SimulationConfig

    d = sim.to_dict()
    d["frame_size"] = list(TRAIN_FRAME)
    if d.get("bg_bleach"):
        level = float(np.max(d["bg"]))
        d.update(bg=[level * (1.0 - d["bg_bleach"]), level], bg_dist="uniform", bg_bleach=0.0)
    return SimulationConfig.from_dict(d)


def train_specialist(physics, base_model: str, run_dir: Path, args: argparse.Namespace) -> dict:
    """Fine-tune ``base_model`` on ``physics`` in segments of ``val_every`` steps until the validation loss
    plateaus or the cap is reached; returns the validation history and the path of the best model."""
    import torch

    from decode_mem.fit.core import FINE_TUNE_BATCH, FINE_TUNE_LR, VAL_SEED
    from decode_mem.model.checkpoint import load_model
    from decode_mem.model.loss import DecodeLoss, LossConfig
    from decode_mem.simulate.dataset import simulate_samples
    from decode_mem.train.config import TrainConfig
    from decode_mem.train.loop import fit
    from decode_mem.train.sizing import fitting_batch
    from decode_mem.train.validation import validate

    device = torch.device("cpu")
    base = load_model(base_model)
    val = simulate_samples(physics, args.val_windows, seed=VAL_SEED)
    loss_fn = DecodeLoss(LossConfig(), base.net.config)

    def score(net) -> dict:
        m = validate(net, val, loss_fn, batch_size=64, device=device, amp_dtype=None,
                     pixel_size=physics.camera.pixel_size)
        return {k: float(m[k]) for k in ("val_loss", "jaccard", "recall", "precision", "rmse_lat")}

    cfg = TrainConfig(out=str(run_dir), steps=args.val_every, batch_size=FINE_TUNE_BATCH, accumulation_steps=1,
                      lr=FINE_TUNE_LR, lr_step=args.lr_step, lr_gamma=args.lr_gamma, init_from=base_model,
                      resume=True, val_every=1_000_000, val_size=1, checkpoint_every=args.val_every, log_every=50,
                      seed=args.seed, device="cpu", memory_tracking=False, quiet=True, threads=1,
                      model=base.net.config, simulation=physics)
    cfg = fitting_batch(cfg, base.net, device)
    history = [{"step": 0, "minutes": 0.0, **score(base.net)}]
    best = dict(history[0], path=base_model)
    stale, t0, converged = 0, time.perf_counter(), False
    while True:
        steps = history[-1]["step"] + args.val_every
        model_path = fit(cfg.with_overrides(steps=steps))
        entry = {"step": steps, "minutes": (time.perf_counter() - t0) / 60, **score(load_model(model_path).net)}
        history.append(entry)
        print(f"  step {steps}: val loss {entry['val_loss']:.4f}, J {entry['jaccard']:.4f} "
              f"({entry['minutes']:.1f} min)", flush=True)
        if entry["val_loss"] < best["val_loss"] - args.min_delta * abs(best["val_loss"]):
            stale = 0
        else:
            stale += 1
        if entry["val_loss"] < best["val_loss"]:
            kept = run_dir / f"best_{steps}.pt"
            shutil.copyfile(model_path, kept)
            best = dict(entry, path=str(kept))
        if stale >= args.patience:
            converged = True
            break
        if entry["minutes"] >= args.cap_minutes:
            break
    return {"history": history, "best": best, "converged": converged, "batch_size": cfg.batch_size,
            "accumulation_steps": cfg.accumulation_steps}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=200, help="test movie length (as bench_fit.py's)")
    p.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS))
    p.add_argument("--model", default=str(ROOT / "data" / "models" / "default_2d.pt"), help="the generalist")
    p.add_argument("--val-every", type=int, default=400, help="steps between validations")
    p.add_argument("--val-windows", type=int, default=1024, help="held-out windows of the true physics")
    p.add_argument("--patience", type=int, default=3, help="validations without improvement that stop it")
    p.add_argument("--min-delta", type=float, default=0.005, help="relative fall of the loss that counts")
    p.add_argument("--lr-step", type=int, default=1000)
    p.add_argument("--lr-gamma", type=float, default=0.7)
    p.add_argument("--cap-minutes", type=float, default=35.0, help="per variant: stop unconverged after this")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fit-json", default=str(RESULTS / "fit.json"), help="bench_fit.py's rows, for the gap")
    p.add_argument("--out", default=str(RESULTS / "specialist.md"))
    p.add_argument("--report-only", action="store_true",
                   help="train nothing: re-write the report from the last run's <out>.json (its rows, command and "
                        "machine) with the gap to the current fit.json")
    args = p.parse_args(argv)
    if args.report_only:
        record = json.loads(Path(args.out).with_suffix(".json").read_text())
        args.frames = record["frames"]
        write_report(Path(args.out), record["rows"], args, record["machine"], record["minutes"] * 60,
                     command=record["command"])
        return 0

    import torch

    from decode_mem.config import load_yaml
    from decode_mem.evaluate import evaluate
    from decode_mem.io.camera import Camera
    from decode_mem.io.localizations import read_localizations
    from decode_mem.simulate.stack import simulate_stack

    torch.set_num_threads(1)
    rows = []
    t_all = time.perf_counter()
    load_start, at = load_average(), commit()
    with tempfile.TemporaryDirectory(prefix="bench_specialist_") as tmp:
        work = Path(tmp)
        names = list(VARIANTS)
        for name in args.variants:
            i = names.index(name)
            sim = simulation(VARIANTS[name])
            px = sim.camera.pixel_size
            stack, gt_csv = work / f"v{i}_test.tif", work / f"v{i}_test.csv"  # bench_fit.py's test movie
            result = simulate_stack(sim, args.frames, stack, gt_csv, seed=500 + i, camera_out=work / f"v{i}.yaml")
            gt = read_localizations(gt_csv, pixel_size=px)
            camera = Camera.from_dict(load_yaml(result.camera, section="camera"), base_dir=result.camera.parent)
            print(f"{name}: training the specialist", flush=True)
            t0 = time.perf_counter()
            trained = train_specialist(specialist_physics(sim), args.model, work / f"v{i}_specialist", args)
            minutes = (time.perf_counter() - t0) / 60
            table, _ = run_decode(stack, Path(trained["best"]["path"]), camera)
            generalist, _ = run_decode(stack, Path(args.model), camera)
            rows.append({"name": name, "n_gt": len(gt), "minutes": minutes, **trained,
                         "specialist": evaluate(table, gt, pixel_size=px).as_dict(),
                         "generalist": evaluate(generalist, gt, pixel_size=px).as_dict()})
            rows[-1]["best"] = {k: v for k, v in trained["best"].items() if k != "path"}
            print(f"{name}: specialist J={rows[-1]['specialist']['jaccard']:.3f} "
                  f"(generalist {rows[-1]['generalist']['jaccard']:.3f}), "
                  f"{'converged' if trained['converged'] else 'NOT converged'} in {minutes:.1f} min", flush=True)
    write_report(Path(args.out), rows, args, machine_line(1, load_start=load_start, at=at), time.perf_counter() - t_all)
    return 0


def _fit_rows(path: Path, frames: int) -> tuple[dict, str]:
    """bench_fit.py's best fit per variant from its JSON, and where it came from ('' when unusable)."""
    if not path.exists():
        return {}, f"`{path.name}` does not exist: run `python benchmarks/bench_fit.py` first"
    data = json.loads(path.read_text())
    if data.get("frames") != frames:
        return {}, f"`{path.name}` measured {data.get('frames')}-frame movies, not {frames}: not comparable"
    best = {r["name"]: max(r["fits"], key=lambda f: f["metrics"]["jaccard"]) for r in data["rows"] if r["fits"]}
    return best, f"`{path.name}` (`{data['command']}`)"


def write_report(out: Path, rows: list[dict], args: argparse.Namespace, machine: str, total: float,
                 command: str | None = None) -> None:
    """The report, its PNG and its JSON; ``command`` is the run that measured ``rows`` when this is not that
    run (``--report-only``: only the gap to ``fit.json`` is computed again)."""
    from decode_mem.io.atomic import atomic_output

    def f(v: float | None, d: int = 3) -> str:
        return "–" if v is None or not np.isfinite(v) else f"{v:.{d}f}"

    fits, source = _fit_rows(Path(args.fit_json), args.frames)
    lines = [
        "# specialist: trained on the true physics until its validation stops improving, vs fit",
        "",
        f"Command: `{command or command_line()}`; {total / 60:.1f} min in all.",
        f"Machine: {machine}.",
        *([f"Gap to fit computed again by `{command_line()}` (trains nothing) from that run's JSON and the "
           "current `fit.json`.", ""] if command else [""]),
        __doc__.split("\n\n", 2)[2].strip(),
        "",
        "| physics | GT | model | steps | minutes | converged | val J (held-out windows) | Jaccard | recall "
        "| precision | RMSE lat (nm) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        b, h0 = r["best"], r["history"][0]
        lines.append(f"| {r['name']} | {r['n_gt']} | shipped generalist | 0 | – | – | {f(h0['jaccard'])} "
                     f"| {f(r['generalist']['jaccard'])} | {f(r['generalist']['recall'])} "
                     f"| {f(r['generalist']['precision'])} | {f(r['generalist']['rmse_lat'], 1)} |")
        m = r["specialist"]
        lines.append(f"| {r['name']} | {r['n_gt']} | specialist (best of {len(r['history']) - 1} validations) "
                     f"| {b['step']} of {r['history'][-1]['step']} | {r['minutes']:.1f} "
                     f"| {'yes' if r['converged'] else '**no** (cap)'} | {f(b['jaccard'])} | {f(m['jaccard'])} "
                     f"| {f(m['recall'])} | {f(m['precision'])} | {f(m['rmse_lat'], 1)} |")
    lines += ["", f"## Goal: fit within {GOAL_GAP:g} Jaccard of the specialist (computed)", "",
              f"fit's numbers: {source}.", ""]
    if fits:
        lines += [f"| physics | specialist J | fit (best budget) J | gap | within {GOAL_GAP:g} |",
                  "|---|---|---|---|---|"]
        for r in rows:
            fit = fits.get(r["name"])
            if fit is None:
                lines.append(f"| {r['name']} | {f(r['specialist']['jaccard'])} | not in fit.json | – | – |")
                continue
            gap = r["specialist"]["jaccard"] - fit["metrics"]["jaccard"]
            verdict = "yes" if gap <= GOAL_GAP else "**no**"
            verdict += "" if r["converged"] else " (specialist not converged)"
            lines.append(f"| {r['name']} | {f(r['specialist']['jaccard'])} | {f(fit['metrics']['jaccard'])} "
                         f"({fit['budget']:g} min) | {gap:+.3f} | {verdict} |")
    png = out.with_suffix(".png")
    _plot(rows, png)
    lines += ["", f"![validation history]({png.name})", ""]
    with atomic_output(out) as tmp:
        tmp.write_text("\n".join(lines))
    write_record(out, rows, args.frames, machine=machine, minutes=total / 60,
                 **({"command": command} if command else {}))
    print(f"wrote {out} and {png}")


def _plot(rows: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    from decode_mem.io.atomic import atomic_output

    fig = Figure(figsize=(10, 4))
    ax_loss, ax_j = fig.subplots(1, 2)
    for r in rows:
        steps = [h["step"] for h in r["history"]]
        ax_loss.plot(steps, [h["val_loss"] for h in r["history"]], marker="o", label=r["name"])
        ax_j.plot(steps, [h["jaccard"] for h in r["history"]], marker="o", label=r["name"])
    ax_loss.set(xlabel="fine-tuning step", ylabel="validation loss (held-out windows)")
    ax_j.set(xlabel="fine-tuning step", ylabel="validation Jaccard (held-out windows)")
    ax_j.legend(fontsize=8)
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")


if __name__ == "__main__":
    raise SystemExit(main())
