"""``run_pipeline``: simulate -> train -> infer -> evaluate -> render, one step after the other, each optional.

Memory is sampled for the whole run (one ``MemoryTracker`` in a sampling thread, the step as its phase) into
``<out>/memory.csv`` and plotted to ``<out>/memory.png``. A finished run writes ``<out>/report.html``
(``decode_mem.report``): what the steps produced — metrics, widefield beside super-resolution, the true drift
of a simulation, memory, the stack's speed — with the command and versions. Everything the run writes is
returned by name.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from decode_mem.config import check_output_folder, resolve_device
from decode_mem.errors import ConfigError, StackError
from decode_mem.io.atomic import atomic_output
from decode_mem.io.drift import describe_drift
from decode_mem.io.localizations import iter_localizations, read_localizations
from decode_mem.memory import MemoryTracker
from decode_mem.model.checkpoint import SHIPPED_MODEL
from decode_mem.model.choice import SHIPPED_LIGHT_MODEL, SHIPPED_WIDE_MODEL
from decode_mem.pipeline.config import PipelineConfig, default_model, load_pipeline, resolve_train

SUFFIX = {"csv": ".csv", "picasso": ".hdf5", "parquet": ".parquet"}


def run_pipeline(path_or_config: str | os.PathLike | PipelineConfig, *, out: str | os.PathLike | None = None,
                 quick: bool = False, overrides: dict[str, Any] | None = None,
                 echo: Callable[[str], object] = print, command: str | None = None) -> dict[str, Path]:
    """Run a pipeline (a YAML path or a :class:`PipelineConfig`); returns ``{name: path}`` of what it wrote.

    ``out``, ``quick`` and ``overrides`` apply to a YAML path (see ``load_pipeline``). ``echo`` receives the
    progress lines (``print`` by default; ``lambda s: None`` for silence). ``command``: the command line shown
    in the report (default: the equivalent ``run_pipeline`` call).
    """
    if isinstance(path_or_config, PipelineConfig):
        config = path_or_config
    else:
        config = load_pipeline(path_or_config, quick=quick, out=out, overrides=overrides)
    _check_inputs(config)
    check_output_folder(config.out)
    if quick:
        echo(quick_note(config))
    config.out.mkdir(parents=True, exist_ok=True)
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    produced: dict[str, Path] = {}
    parts: dict[str, Any] = {}  # what the steps hand to the report
    tracker = MemoryTracker(config.out / "memory.csv", log_interval=1, device=str(device))
    produced["memory_csv"] = tracker.log_file  # type: ignore[assignment]
    t_start = time.perf_counter()
    try:
        if config.simulate is not None:
            with _phase(tracker, "simulate"):
                produced.update(_simulate(config, device, echo, parts))
        if config.psf is not None:
            with _phase(tracker, "psf"):
                produced.update(_psf(config, echo, parts))
            config = resolve_train(config)
        if config.train is not None:
            with _phase(tracker, "train"):
                produced.update(_train(config, echo))
        if config.infer is not None:
            with _phase(tracker, "infer"):
                produced.update(_infer(config, device, echo, parts))
        if config.drift is not None:
            with _phase(tracker, "drift"):
                produced.update(_drift(config, produced, echo, parts))
        if config.evaluate is not None:
            with _phase(tracker, "evaluate"):
                produced.update(_evaluate(config, produced, echo, parts))
        if config.render is not None:
            with _phase(tracker, "render"):
                produced.update(_render(config, produced, echo, parts))
    finally:
        tracker.close()
    tracker.update(phase="end", force_log=True)
    produced["memory_png"] = tracker.plot_history(config.out / "memory.png")
    maxima = tracker.get_max_usage()
    echo(f"memory: peak RssAnon {_mb(maxima.get('rss_anon_mb'))}, peak VmRSS {_mb(maxima.get('vm_rss_mb'))}"
         + (f", peak CUDA allocated {_mb(maxima.get('cuda_allocated_mb'))}" if device.type == "cuda" else ""))
    wall = time.perf_counter() - t_start
    if command is None:
        command = f"run_pipeline({str(path_or_config)!r}" + (", quick=True" if quick else "") + ")"
    produced["report"] = _report(config, device, parts, produced, tracker.history, command, wall)
    echo(f"\ndone in {wall:.1f} s; everything is in {config.out}/ (open report.html):")
    if quick:
        echo(f"  ({quick_note(config)})")
    width = max(len(k) for k in produced)
    for name, path in produced.items():
        echo(f"  {name:<{width}}  {path}")
    return produced


def quick_note(config: PipelineConfig) -> str:
    """What a ``--quick`` run shows and what it does not (printed first, recalled last)."""
    sizes = []
    if config.simulate is not None:
        sizes.append(f"{config.simulate.frames} frames")
    trains = config.train is not None or config.train_deferred is not None
    if trains:
        steps = config.train.steps if config.train is not None else config.train_deferred.get("steps")
        if steps is not None:
            sizes.append(f"{steps} training steps")
    line = (f"--quick: a smoke run with the YAML's tiny sizes ({', '.join(sizes) or 'its quick section'}): it "
            "shows that every step runs and writes its files, not what the full run finds")
    if trains:
        line += ("; its model is barely trained, so few or no localizations and a Jaccard near 0 are expected "
                 "here")
    elif config.simulate is not None:
        line += "; its metrics come from a short movie"
    return line + ". Without --quick: the full run."


def _check_inputs(config: PipelineConfig) -> None:
    """Every input the YAML names exists, before any step runs (not after the simulation and the training)."""
    named: list[tuple[str, str | None]] = []
    if config.psf is not None:
        named += [("psf.beads", b) for b in config.psf.beads or ()]
    if config.infer is not None:
        named += [("infer.stack", config.infer.stack),
                  ("infer.model", None if config.infer.model == "shipped" else config.infer.model)]
    if config.evaluate is not None:
        named.append(("evaluate.gt", config.evaluate.gt))
    for key, value in named:
        if value is not None and not config.input_path(value).exists():
            raise ConfigError(f"{config.source}: {key}: {config.input_path(value)}: no such file or folder")


def _mb(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.0f} MB"


@contextmanager
def _phase(tracker: MemoryTracker, name: str) -> Iterator[None]:
    tracker.update(phase=name, force_log=True)
    with tracker.start_sampling(0.25, phase=name):
        yield
    tracker.update(phase=name, force_log=True)


# ------------------------------------------------------------------------------------------------ steps

def _simulate(config: PipelineConfig, device: torch.device, echo: Callable[[str], object],
              parts: dict[str, Any]) -> dict[str, Path]:
    from decode_mem.simulate.stack import simulate_stack

    step = config.simulate
    assert step is not None
    sim = step.simulation
    h, w = sim.frame_size
    what = (f"{sim.structure.kind} of blinking sites" if sim.structure.enabled
            else f"density {sim.density:g}/µm²") + (f", drift {sim.drift_nm:g} nm" if sim.drift_nm else "")
    parts["simulation"] = f"{step.frames} frames of {h}x{w} px, {sim.psf} PSF, {what}, {sim.camera.kind} camera"
    echo(f"[simulate] {parts['simulation']}, seed {config.seed}")
    t0 = time.perf_counter()
    result = simulate_stack(sim, step.frames, config.out / step.stack, config.out / step.gt, seed=config.seed,
                            block=step.block, device=device)
    echo(f"[simulate] {result.n_localizations} ground-truth localizations in {time.perf_counter() - t0:.1f} s")
    produced = {"stack": result.out, "ground_truth": result.gt}
    if result.drift is not None:
        produced["true_drift"] = result.drift
    return produced  # type: ignore[return-value]


def _psf(config: PipelineConfig, echo: Callable[[str], object], parts: dict[str, Any]) -> dict[str, Path]:
    """Bead z-stacks -> ``<out>/<psf.out>`` (+ its figure); simulated beads when none are given."""
    import numpy as np
    import tifffile

    from decode_mem.io.psf_file import write_psf
    from decode_mem.psf.beads import BeadSettings, calibrate_beads
    from decode_mem.psf.plot import plot_psf

    step = config.psf
    assert step is not None
    produced: dict[str, Path] = {}
    if step.beads is None:
        from dataclasses import replace

        from decode_mem.simulate.beads import simulate_bead_stack

        assert config.simulate is not None
        sim = config.simulate.simulation
        truth = replace(sim, frame_size=step.frame_size)
        h, w = step.frame_size
        rng = np.random.default_rng(config.seed)
        roi = step.roi or 21
        half = roi // 2  # beads on a grid one region + 3 px apart, away from the edges
        gx, gy = np.meshgrid(np.arange(half + 3, w - half - 3, roi + 3), np.arange(half + 3, h - half - 3, roi + 3))
        n = min(step.n_beads, gx.size)
        x = gx.ravel()[:n] + rng.uniform(-0.5, 0.5, n)
        y = gy.ravel()[:n] + rng.uniform(-0.5, 0.5, n)
        z = (np.arange(step.planes) - (step.planes - 1) / 2) * abs(step.z_step)
        adu = simulate_bead_stack(truth, x, y, z, photons=step.photons, bg=step.bg,
                                  offset=rng.normal(0.0, 10.0, n), seed=config.seed + 7)
        beads = [config.out / "beads.tif"]
        tifffile.imwrite(beads[0], adu)
        produced["bead_stack"] = beads[0]
        echo(f"[psf] simulated a bead z-stack: {n} beads, {step.planes} planes {abs(step.z_step):g} nm apart, "
             f"{sim.psf} PSF -> {_rel(beads[0])}")
        camera = sim.camera
    else:
        from decode_mem.io.metadata import read_metadata, resolve_camera

        beads = [config.input_path(b) for b in step.beads]
        camera = (config.simulate.simulation.camera if config.simulate is not None
                  else resolve_camera(read_metadata(beads[0]))[0])
    t0 = time.perf_counter()
    settings = BeadSettings(z_step=step.z_step, z_start=step.z_start, roi=step.roi, upsample=step.upsample)
    cal = calibrate_beads([str(b) for b in beads], camera, settings)
    out = config.out / step.out
    write_psf(out, cal.spline)
    png = plot_psf(cal, out.with_suffix(".png"))
    s = cal.spline
    res = float(np.median([b["residual"] for b in cal.beads]))
    parts["psf"] = (f"{len(cal.beads)} beads, valid z {s.z_range[0]:g} to {s.z_range[1]:g} nm, median residual "
                    f"per bead {100 * res:.1f} %")
    echo(f"[psf] {parts['psf']} -> {_rel(out)} in {time.perf_counter() - t0:.1f} s")
    produced.update({"psf": out, "psf_plot": png})
    parts.setdefault("figures", []).append(("PSF calibration from beads", png.read_bytes()))
    return produced


def _train(config: PipelineConfig, echo: Callable[[str], object]) -> dict[str, Path]:
    from dataclasses import replace

    from decode_mem.train.observers import train_observed

    cfg = config.train
    assert cfg is not None
    echo(f"[train] training a small model from scratch for {cfg.steps} steps on simulated "
         f"{cfg.simulation.psf} data -> {cfg.out_dir} (a brief run, not a production model)")
    t0 = time.perf_counter()
    # the pipeline's own tracker samples the memory; a line every 30 s: step, time so far, time left
    model = train_observed(replace(cfg, memory_tracking=False), echo=echo)
    echo(f"[train] done in {time.perf_counter() - t0:.1f} s")
    produced = {"model": model, "train_log": cfg.out_dir / "train_log.csv"}
    if (cfg.out_dir / "training.png").exists():
        produced["train_plot"] = cfg.out_dir / "training.png"
    return produced


def _infer(config: PipelineConfig, device: torch.device, echo: Callable[[str], object],
           parts: dict[str, Any]) -> dict[str, Path]:
    from decode_mem.infer import InferConfig, run_inference
    from decode_mem.report import StackRow

    step = config.infer
    assert step is not None
    model = default_model(config, device.type)
    stack = config.input_path(step.stack) if step.stack is not None else config.out / config.simulate.stack  # type: ignore[union-attr]
    if model in (SHIPPED_MODEL, SHIPPED_WIDE_MODEL, SHIPPED_LIGHT_MODEL):
        kind = {SHIPPED_WIDE_MODEL: "the wide generalist 2D model, chosen on a GPU",
                SHIPPED_LIGHT_MODEL: "the light generalist 2D model, chosen on a CPU"}.get(
            model, "the generalist 2D model")
        which = f"the shipped model {_rel(model)} ({kind}; its envelope: {_rel(model.with_suffix('.md'))})"
    elif config.train is not None and model == config.train.out_dir / "model.pt":
        which = f"the model just trained, {model}"
    else:
        which = f"the model {model}"
    echo(f"[infer] {_rel(stack)} with {which}; chunk_size {step.chunk_size}, batch_size {step.batch_size}, "
         f"device {device}")
    t0 = time.perf_counter()
    cfg = InferConfig(inputs=(str(stack),), out=str(config.out), model=str(model), formats=step.formats,
                      chunk_size=step.chunk_size, batch_size=step.batch_size, amp=step.amp, device=str(device),
                      threshold=step.threshold, threads=config.threads, report=False)
    report = run_inference(cfg)
    if report.failures:
        raise StackError("infer: " + "; ".join(f.line() for f in report.failures))
    parts["stacks"] = [StackRow.from_summary(s) for s in report.stacks]
    parts["model"] = which
    produced = {f"localizations_{fmt}": config.out / f"{stack.stem}{SUFFIX[fmt]}" for fmt in step.formats}
    if (config.out / f"{stack.stem}.json").exists():  # run_inference's per-stack summary
        produced["infer_summary"] = config.out / f"{stack.stem}.json"
    missing = [str(p) for p in produced.values() if not p.exists()]
    if missing:
        raise ConfigError(f"infer: expected output not written: {', '.join(missing)}")
    n = sum(len(t) for t in iter_localizations(produced["localizations_csv"], pixel_size=1.0))
    echo(f"[infer] {n} localizations in {time.perf_counter() - t0:.1f} s")
    return produced


def _drift(config: PipelineConfig, produced: dict[str, Path], echo: Callable[[str], object],
           parts: dict[str, Any]) -> dict[str, Path]:
    """Drift-correct the localizations (``decode_mem.drift``); the render step then shows the corrected ones.
    Evaluation stays on the raw localizations: the simulated ground truth lists the drifted positions."""
    from decode_mem.drift import correct_file
    from decode_mem.io.drift import read_drift_csv
    from decode_mem.report import DriftCurve
    from decode_mem.report.figures import drift_rmse

    assert config.drift is not None
    t0 = time.perf_counter()
    truth = produced.get("true_drift")
    try:
        res = correct_file(produced["localizations_csv"], config.out, config.drift, pixel_size=_pixel_size(config),
                           truth=truth)
    except StackError as e:  # e.g. too few localizations: go on with the raw ones, and say so
        parts.setdefault("warnings", []).append(f"no drift correction: {e}")
        echo(f"[drift] skipped: {e}")
        return {}
    est = res.estimate
    curve = DriftCurve(est.frames, est.dxdy, label=f"estimated ({est.method})",
                       truth=read_drift_csv(truth) if truth is not None else None)
    parts["drift"] = curve
    rmse = drift_rmse(curve)
    echo(f"[drift] {len(est.centers)} segments ({est.method}): {describe_drift(est.dxdy)}"
         + (f"; RMSE to the simulated drift {rmse:.1f} nm" if rmse is not None else "")
         + f"; {time.perf_counter() - t0:.1f} s")
    return {"localizations_undrift": res.corrected, "drift_table": res.table, "drift_plot": res.plot}


def _evaluate(config: PipelineConfig, produced: dict[str, Path], echo: Callable[[str], object],
              parts: dict[str, Any]) -> dict[str, Path]:
    from decode_mem.evaluate import evaluate

    step = config.evaluate
    assert step is not None
    gt_path = config.input_path(step.gt) if step.gt is not None else produced["ground_truth"]
    px = _pixel_size(config)
    pred = read_localizations(produced["localizations_csv"], pixel_size=px)
    gt = read_localizations(gt_path, pixel_size=px)
    metrics = evaluate(pred, gt, pixel_size=px, tolerance_lat=step.tolerance_lat, tolerance_ax=step.tolerance_ax)
    echo("[evaluate] against " + _rel(gt_path) + "\n" + metrics.table())
    parts["metrics"] = metrics.rows()
    payload = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.as_dict().items()}
    path = config.out / step.json
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, allow_nan=False) + "\n")
    return {"metrics": path}


def _render(config: PipelineConfig, produced: dict[str, Path], echo: Callable[[str], object],
            parts: dict[str, Any]) -> dict[str, Path]:
    from decode_mem.io import open_stack
    from decode_mem.render import mean_frame, save_image, save_side_by_side, save_widefield
    from decode_mem.render.image import Rendering
    from decode_mem.report import Images

    step = config.render
    assert step is not None
    px = _pixel_size(config)
    with open_stack(produced["stack"] if "stack" in produced else config.input_path(config.infer.stack)) as s:  # type: ignore[union-attr,arg-type]
        n_frames, shape = s.shape[0], tuple(s.shape[1:])
        widefield = mean_frame(s)  # streamed: one block of frames at a time
    sigma = step.sigma if step.blur != "none" else None
    locs = produced.get("localizations_undrift", produced["localizations_csv"])  # drift-corrected when there are
    rendering = Rendering(shape_px=shape, pixel_size=px, render_pixel=step.pixel, blur=step.blur, sigma=sigma)
    for table in iter_localizations(locs, pixel_size=px):
        rendering.add(table)
    image, n, rp = rendering.image(consume=True), rendering.n, rendering.render_pixel
    assert rp is not None
    out = {"image": config.out / step.image, "widefield": config.out / step.widefield,
           "side_by_side": config.out / step.side_by_side}
    save_image(image, out["image"], render_pixel=rp)
    save_widefield(widefield, out["widefield"], pixel_size=px)
    save_side_by_side(widefield, image, out["side_by_side"], pixel_size=px, render_pixel=rp,
                      n_frames=n_frames, n_locs=n, zoom=step.zoom)
    parts["images"] = Images(px, widefield, image, rp, n_frames, n, step.zoom)
    if _is_3d(config):
        from decode_mem.render import render_depth, save_depth_png

        rgb, z_range, n_z = render_depth(iter_localizations(locs, pixel_size=px), shape_px=shape, pixel_size=px,
                                         render_pixel=rp, sigma=step.sigma or 2 * rp)
        out["depth_image"] = save_depth_png(rgb, z_range, config.out / step.depth_image, render_pixel=rp)
        parts.setdefault("figures", []).append(("Localizations coloured by z", out["depth_image"].read_bytes()))
        span = f"{z_range[0]:.0f} to {z_range[1]:.0f} nm" if n_z else "no localizations with z: an empty image"
        echo(f"[render] coloured by z ({span}) -> {out['depth_image'].name}")
    echo(f"[render] {n} localizations inside the field -> {image.shape[1]} x {image.shape[0]} px (width x height) of "
         f"{rp:g} nm{'' if step.pixel else ' (from the precision)'}, blur {step.blur}; "
         f"widefield (mean of {n_frames} frames) beside it in {out['side_by_side'].name}")
    return out


def _report(config: PipelineConfig, device: torch.device, parts: dict[str, Any], produced: dict[str, Path],
            memory: dict[str, Any], command: str, wall: float) -> Path:
    """``<out>/report.html`` from what the steps handed over (a step that did not run leaves its section out)."""
    from decode_mem.io.drift import read_drift_csv
    from decode_mem.report import DriftCurve, ReportData, write_report

    summary = [("pipeline", config.source), ("output folder", str(config.out)), ("device", str(device)),
               ("wall time", f"{wall:.1f} s")]
    summary += [(key, parts[key]) for key in ("simulation", "psf", "model") if key in parts]
    drift = parts.get("drift")
    if drift is None and "true_drift" in produced:
        frames, dxdy = read_drift_csv(produced["true_drift"])
        drift = DriftCurve(frames, dxdy, label="true drift (simulated; not corrected)")
    path = config.out / "report.html"
    files = [(name, p) for name, p in produced.items() if name != "report"] + [("report", path)]
    data = ReportData(title=f"decode_mem pipeline: {Path(config.source).name}", summary=summary,
                      metrics=parts.get("metrics", ()), images=parts.get("images"), drift=drift, memory=memory,
                      stacks=parts.get("stacks", ()), warnings=parts.get("warnings", ()),
                      figures=parts.get("figures", ()), files=files,
                      command=command)
    return write_report(path, data)


def _is_3d(config: PipelineConfig) -> bool:
    """Whether the localizations have a z: the simulation is 3-D, or the model predicts z."""
    if config.simulate is not None:
        return config.simulate.simulation.is_3d
    from decode_mem.model.checkpoint import load_model

    return bool(load_model(default_model(config)).net.config.use_z)


def _pixel_size(config: PipelineConfig) -> float:
    """Camera pixel (nm): the simulation's, else the model's."""
    if config.simulate is not None:
        return config.simulate.simulation.camera.pixel_size
    from decode_mem.model.checkpoint import load_model

    return load_model(default_model(config)).pixel_size


def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
