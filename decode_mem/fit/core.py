"""``fit_movies``: calibrate a movie -> use or fine-tune a model matched to it -> validate -> localize.

1. **calibrate** the first movie (``decode_mem.calibrate``): PSF width, background, photons, density, on-time,
   camera sanity -> ``calib.yaml`` + ``calib.png``;
2. **decide**: with ``train='auto'`` the base model (``base_model``, else the shipped generalist for the device:
   the wide one on a GPU, ``decode_mem.model.choice``) is used as it is when its training envelope covers the
   movie, else fine-tuned; ``'always'``/``'never'`` force it;
3. **fine-tune** the base model on simulations matched to the calibration (``simulation_from_estimates``: a
   band around the measured physics) on whatever device is there, for what ``budget_minutes`` (the whole
   command's wall time) leaves after the time spent so far and the time the last two stages are predicted to
   take (``decode_mem.fit.budget``) — checkpoints in ``<out>/training``, so Ctrl-C or a kill leaves a state the
   next run continues from;
4. **validate** the fine-tuned and the base model on the same held-out matched simulations (another seed):
   Jaccard, RMSE and efficiency side by side; the better one localizes, and is copied to ``<out>/model.pt``
   with a card saying which it is (the fine-tuned weights stay in ``<out>/training/fine_tuned.pt``);
5. **localize** every movie (``decode_mem.infer``: the same outputs and summaries), write ``fit.json``.

Fine-tuning keeps the base model's architecture. With a PSF file (``psf``, from ``python -m decode_mem.psf``) the
movie is 3-D: a 3-D model (z channel) is trained from scratch within the budget on the matched simulations rendered
with that PSF over its valid z range, validated on held-out ones, and localizes (``z [nm]`` in every output). Its
matched density, photons and background also come from the pixels' cumulants and the PSF
(``calibrate.crowding``), which hold where 3-D spots are too spread out or too dense for the calibration to count
and measure them (``fit.json``, ``pixel_statistics``).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from decode_mem.calibrate import calibrate_movie, covers, plot_calibration, save_calibration
from decode_mem.calibrate.crowding import CrowdedPhysics, crowded_estimates, crowded_physics
from decode_mem.calibrate.cumulants import LIGHT_FRAMES
from decode_mem.calibrate.match import simulation_from_estimates
from decode_mem.config import check_output_folder, resolve_device
from decode_mem.errors import ConfigError, Stopped
from decode_mem.export.card import export_model
from decode_mem.fit.budget import BudgetSplit, split_budget
from decode_mem.infer import run_inference
from decode_mem.infer.domain import MODEL_FIX
from decode_mem.infer.observe import InferObserver
from decode_mem.io.atomic import atomic_output
from decode_mem.io.camera import Camera
from decode_mem.model.checkpoint import load_model
from decode_mem.model.choice import choose_model
from decode_mem.model.loss import DecodeLoss, LossConfig
from decode_mem.simulate.config import SimulationConfig
from decode_mem.simulate.dataset import simulate_samples
from decode_mem.train.config import TrainConfig
from decode_mem.train.loop import CHECKPOINT, fit
from decode_mem.train.sizing import fitting_batch
from decode_mem.train.validation import validate

VAL_SEED = 777_001  # held-out matched windows: not the training stream's seed
FINE_TUNE_LR = 3e-4
FINE_TUNE_BATCH = 16

Progress = Callable[[str, dict[str, Any]], object]  # (stage, details) -> ignored


@dataclass(frozen=True)
class FitReport:
    """What ``fit_movies`` did: the decision and why, validation of both models, the model used, the run."""

    decision: str
    reasons: tuple[str, ...]
    model: str
    validation: dict[str, dict[str, float]] = field(default_factory=dict)
    train_minutes: float = 0.0
    train_steps: int = 0
    inference: Any = None
    budget: BudgetSplit | None = None
    trained_at: float = 0.0  # time.perf_counter() when training ended
    timing: dict[str, float] = field(default_factory=dict)
    base_choice: dict[str, Any] = field(default_factory=dict)  # ``ModelChoice.as_dict`` of the base model
    pixel_statistics: dict[str, Any] = field(default_factory=dict)  # 3-D: ``CrowdedPhysics.as_dict``, or why not

    def as_dict(self) -> dict[str, Any]:
        inf = self.inference
        return {"decision": self.decision, "reasons": list(self.reasons), "model": self.model,
                "base_model": self.base_choice,
                "validation": self.validation, "train_minutes": round(self.train_minutes, 2),
                "train_steps": self.train_steps, "pixel_statistics": self.pixel_statistics,
                "budget": {**(self.budget.as_dict() if self.budget is not None else {}), **self.timing},
                "stacks": [s.as_dict() for s in inf.stacks] if inf is not None else [],
                "failures": [f.line() for f in inf.failures] if inf is not None else []}


def fit_movies(cfg, *, on_progress: Progress | None = None, on_step: Callable[[int, dict], object] | None = None,
               observer: InferObserver | None = None) -> FitReport:
    """Run the five stages of the module docstring for ``cfg`` (a ``FitConfig``); see there."""
    started = time.perf_counter()
    progress = on_progress or (lambda stage, details: None)
    out = check_output_folder(cfg.out_dir)
    _check_field(cfg)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    choice = choose_model(cfg.base_model, resolve_device(cfg.device).type,  # the wide model on a GPU
                          light_refused="fine-tuning starts from the small one, for accuracy")
    base_path = str(choice.path)
    base = load_model(base_path)

    # 1. calibrate
    progress("calibrate", {"movie": cfg.movies[0]})
    calibration = calibrate_movie(cfg.movies[0], cfg.camera, frames=cfg.calib_frames, seed=cfg.seed,
                                  light_frames=LIGHT_FRAMES if cfg.psf else 0)  # the pixels' cumulants: 3-D only
    out.mkdir(parents=True, exist_ok=True)  # after the movie was read: a bad movie leaves no folder behind
    camera: Camera = calibration.camera
    gaps = covers(calibration, base.envelope)
    save_calibration(calibration, out / "calib.yaml", extra={"model_coverage": gaps or "covered"})
    plot_calibration(calibration, out / "calib.png")
    progress("calibrated", {"estimates": {k: e.value for k, e in calibration.estimates.items()},
                            "camera_warnings": list(calibration.camera_check.warnings), "outside": gaps})

    try:
        return _decide_and_localize(cfg, calibration, camera, gaps, base_path, base, choice, progress, on_step,
                                    observer, started)
    except Stopped as e:  # Ctrl-C or SIGTERM in training or localization: the training checkpoint is kept
        raise Stopped(f"fit stopped ({e}); the same fit command continues the training from its checkpoint in "
                      f"{out / 'training'} (a localization starts again)", signum=e.signum, stem=e.stem,
                      frame=e.frame, frames=e.frames) from e


def _decide_and_localize(cfg, calibration: Any, camera: Camera, gaps: list[str], base_path: str, base: Any,
                         choice: Any, progress: Progress, on_step: Callable[[int, dict], object] | None,
                         observer: InferObserver | None, started: float) -> FitReport:
    """Stages 2 to 5 (fit_movies')."""
    out = cfg.out_dir
    # 2. decide
    if cfg.psf is not None:
        report = _train_3d(cfg, calibration, camera, progress, on_step, started)
    elif cfg.train == "never" or (cfg.train == "auto" and not gaps):
        reasons = ("the base model's envelope covers the movie",) if not gaps else tuple(gaps)
        decision = "base model" + (" (training disabled)" if cfg.train == "never" else "")
        report = FitReport(decision, reasons, base_path)
    else:
        report = _fine_tune(cfg, base_path, base, calibration, camera, gaps, progress, on_step, started)

    # 5. localize every movie with the chosen model
    progress("localize", {"model": report.model, "movies": len(cfg.movies)})
    inference = run_inference(cfg.infer_config(model=report.model, camera=camera),
                              _AfterFit(observer or InferObserver(), report.decision))
    now = time.perf_counter()
    timing = {"total_s": round(now - started, 1)}
    if report.budget is not None:
        timing["after_training_s"] = round(now - report.trained_at, 1)
    report = replace(report, inference=inference, timing=timing, base_choice=choice.as_dict())
    with atomic_output(out / "fit.json") as tmp:
        tmp.write_text(json.dumps(report.as_dict(), indent=2, default=str) + "\n")
    return report


def _check_field(cfg) -> None:
    """A PSF that changes across the field was calibrated over the camera's frame: every movie must be of that
    frame size (the model reads each pixel's place in the field); one line naming the movie, before any work."""
    from decode_mem.io.field_psf_file import field_header
    from decode_mem.io.stack import open_stack

    head = field_header(cfg.psf) if cfg.psf is not None else None
    if head is None:
        return
    for movie in cfg.movies:
        with open_stack(movie) as stack:
            size = tuple(int(v) for v in stack.shape[1:3])
        if size != tuple(head["field_shape"]):
            raise ConfigError(f"{movie}: frames of {size[0]}x{size[1]} px, but {cfg.psf} changes across a "
                              f"{head['field_shape'][0]}x{head['field_shape'][1]} px field (the beads' frames): "
                              "record the movie on the same camera region as the beads")


def matched_3d(estimates: dict[str, float], camera: Camera, psf: str) -> SimulationConfig:
    """The matched simulation of a 3-D movie: ``simulation_from_estimates`` with the PSF file's spline over its
    valid z range (the measured 2-D width does not apply: the file sets the width at every z); a PSF that changes
    across the field: z targets from the focal plane at each emitter's place (``z_reference``)."""
    from decode_mem.io.field_psf_file import field_header

    section = simulation_from_estimates(estimates, camera)
    section.pop("psf_sigma_range", None)
    section.update(psf="spline", psf_file=str(psf), z_range=list(valid_z(psf)))
    if field_header(psf) is not None:  # the network reads z from the focal plane where each spot is
        section["z_reference"] = "focal_plane"
    return SimulationConfig.from_dict(section)


def valid_z(psf: str) -> tuple[float, float]:
    """The z range (nm) a PSF file is valid for: everywhere on the field for a PSF that changes across it."""
    from decode_mem.io.field_psf_file import field_header
    from decode_mem.io.psf_file import psf_header

    field = field_header(psf)
    return tuple(field["z_range"] if field is not None else psf_header(psf)["z_range"])


def target_z_scale(matched: SimulationConfig) -> float:
    """The 3-D model's ``z_scale``: 1.2x the largest |z| it is trained to read, the z range's or (z from the focal
    plane where the PSF changes across the field) that range less the PSF's focal shifts."""
    reach = max(abs(v) for v in matched.z_range)
    if matched.z_reference == "focal_plane":
        from decode_mem.simulate.field_spline import widened_range

        low, high = widened_range(np.asarray(matched.field_psf().field.bead_shift, np.float64)[:, None])
        reach = max(abs(matched.z_range[0] - float(high[0])), abs(matched.z_range[1] - float(low[0])))
    return reach * 1.2


def _train_3d(cfg, calibration: Any, camera: Camera, progress: Progress,
              on_step: Callable[[int, dict], object] | None, started: float) -> FitReport:
    """A 3-D model from scratch on the PSF file for the budget (resumable), validated on held-out windows."""
    from decode_mem.model.config import ModelConfig
    from decode_mem.model.net import DecodeNet

    estimates = {k: e.value for k, e in calibration.estimates.items()}
    physics, record = _crowded_physics(estimates, calibration.camera_check.ok, camera, cfg.psf)
    matched = matched_3d(crowded_estimates(estimates, physics), camera, cfg.psf)
    model_cfg = ModelConfig(use_z=True, z_scale=target_z_scale(matched), field_shape=matched.field_shape,
                            z_reference=matched.z_reference)  # knows the field and where its z is read from
    device = resolve_device(cfg.device)
    val = simulate_samples(matched, cfg.val_windows, seed=VAL_SEED)
    fixed = cfg.train_steps is not None  # a fixed amount of training (benchmarks), else the budget's time
    # the budget's split times localization and evaluation: nothing to split when the steps are fixed
    # the network is timed bare (no PSF to make its z absolute): where z is read from changes nothing timed
    split = None if fixed else _split(cfg, started, DecodeNet(replace(model_cfg, z_reference="absolute")), camera,
                                      matched, device, cfg.val_windows, progress)
    run_dir = cfg.out_dir / "training"
    train_cfg = TrainConfig(out=str(run_dir), steps=cfg.train_steps if fixed else 1_000_000,
                            batch_size=FINE_TUNE_BATCH, accumulation_steps=1, lr=1e-3, lr_step=2_000, lr_gamma=0.8,
                            max_minutes=None if fixed else split.train_s / 60,
                            lr_decay_to=None if fixed else cfg.lr_decay_to, resume=True,
                            val_every=1_000_000, val_size=16, checkpoint_every=100, log_every=20, seed=cfg.seed,
                            device=cfg.device, memory_tracking=False, quiet=True, memory_limit=cfg.memory_limit,
                            model=model_cfg, simulation=matched)
    progress("train", {"budget_minutes": cfg.budget_minutes, "train_minutes": train_cfg.max_minutes,
                       "budget": None if split is None else split.as_dict(), "why": [f"3-D with the PSF {cfg.psf}"],
                       "pixel_statistics": record,
                       "batch_size": train_cfg.batch_size, "accumulation_steps": train_cfg.accumulation_steps})
    t0 = time.perf_counter()
    fit(train_cfg, on_step=on_step)
    minutes = (time.perf_counter() - t0) / 60
    trained_at = time.perf_counter()
    export_model(run_dir, cfg.out_dir / "model", n_eval=min(64, cfg.val_windows))
    path = str(cfg.out_dir / "model.pt")
    model = load_model(path)
    progress("validate", {"windows": cfg.val_windows})
    m = validate(model.net.to(device), val, DecodeLoss(LossConfig(), model.net.config), batch_size=16, device=device,
                 amp_dtype=None, pixel_size=camera.pixel_size)
    keys = [k for k in ("jaccard", "recall", "precision", "rmse_lat", "rmse_ax") if k in m]
    scores = {"3-D model": {k: round(float(m[k]), 4) for k in keys}}
    return FitReport("3-D model trained from scratch", (f"PSF file {cfg.psf}",), path, scores, minutes, model.step,
                     budget=split, trained_at=trained_at, pixel_statistics=record)


def _crowded_physics(estimates: dict[str, float], camera_ok: bool, camera: Camera,
                     psf: str) -> tuple[CrowdedPhysics | None, dict[str, Any]]:
    """The density, photons and background the pixels' cumulants give with the PSF file's spline over its z range
    (``calibrate.crowding``), and what ``fit.json`` records of them: their numbers, or why there are none (they
    need the camera's noise right)."""
    from decode_mem.simulate.config import file_spline

    if not camera_ok:
        return None, {"note": "not used: the camera check found the camera settings suspect (the noise they "
                              "predict is needed)"}
    physics = crowded_physics(estimates, camera.pixel_size, file_spline(psf), valid_z(psf))
    if physics is None:
        return None, {"note": "not used: no emitter light above the camera's noise"}
    return physics, physics.as_dict()


def _fine_tune(cfg, base_path: str, base: Any, calibration: Any, camera: Camera, gaps: list[str],
               progress: Progress, on_step: Callable[[int, dict], object] | None, started: float) -> FitReport:
    """Stages 3 and 4: fine-tune within the budget, validate both models on held-out matched windows."""
    matched = SimulationConfig.from_dict(simulation_from_estimates(
        {k: e.value for k, e in calibration.estimates.items()}, camera))
    device = resolve_device(cfg.device)
    val = simulate_samples(matched, cfg.val_windows, seed=VAL_SEED)
    split = _split(cfg, started, base.net, camera, matched, device, 2 * cfg.val_windows, progress)
    run_dir = cfg.out_dir / "training"
    train_cfg = TrainConfig(out=str(run_dir), steps=1_000_000, batch_size=FINE_TUNE_BATCH, accumulation_steps=1,
                            lr=FINE_TUNE_LR, lr_step=1_000_000, max_minutes=split.train_s / 60,
                            lr_decay_to=cfg.lr_decay_to, init_from=base_path,
                            resume=True, val_every=1_000_000, val_size=16, checkpoint_every=100, log_every=20,
                            seed=cfg.seed, device=cfg.device, memory_tracking=False, quiet=True,
                            memory_limit=cfg.memory_limit, model=base.net.config, simulation=matched)
    if not (run_dir / CHECKPOINT).exists():  # a run that continues keeps the sizes it started with
        train_cfg = fitting_batch(train_cfg, base.net.to(device), device)
    progress("train", {"budget_minutes": cfg.budget_minutes, "train_minutes": train_cfg.max_minutes,
                       "budget": split.as_dict(), "why": gaps or ["--train always"],
                       "batch_size": train_cfg.batch_size, "accumulation_steps": train_cfg.accumulation_steps})
    t0 = time.perf_counter()
    fit(train_cfg, on_step=on_step)
    minutes = (time.perf_counter() - t0) / 60
    trained_at = time.perf_counter()
    tuned_pt, tuned_md = export_model(run_dir, run_dir / "fine_tuned", n_eval=min(64, cfg.val_windows))
    tuned = load_model(tuned_pt)

    # 4. validate both on the same held-out matched windows
    progress("validate", {"windows": cfg.val_windows})
    loss_fn = DecodeLoss(LossConfig(), base.net.config)
    scores = {}
    for name, model in (("fine-tuned", tuned), ("base", base)):
        m = validate(model.net.to(device), val, loss_fn, batch_size=16, device=device, amp_dtype=None,
                     pixel_size=camera.pixel_size)
        scores[name] = {k: round(float(m[k]), 4) for k in ("jaccard", "recall", "precision", "rmse_lat")}
    better = scores["fine-tuned"]["jaccard"] >= scores["base"]["jaccard"]
    decision = "fine-tuned model" if better else "base model (fine-tuning did not beat it on held-out windows)"
    model = _place_winner(cfg.out_dir, (tuned_pt, tuned_md) if better else (Path(base_path),
                          Path(base_path).with_suffix(".md")), decision, scores, tuned_pt)
    return FitReport(decision, tuple(gaps) or ("--train always",), model, scores, minutes, tuned.step,
                     budget=split, trained_at=trained_at)


def _split(cfg, started: float, net: Any, camera: Camera, simulation: SimulationConfig, device: torch.device,
           validation_windows: int, progress: Progress) -> BudgetSplit:
    """The budget's split for this fit (``decode_mem.fit.budget``); a budget too small for it is warned of."""
    split = split_budget(cfg.budget_minutes, started, net, cfg.movies, camera, simulation, device,
                         validation_windows=validation_windows, card_windows=min(64, cfg.val_windows),
                         infer_sizes={"chunk_size": cfg.chunk_size, "batch_size": cfg.batch_size,
                                      "memory_limit": cfg.memory_limit})
    if not split.fits:
        progress("warning", {"line": split.warning()})
    return split


def _place_winner(out: Path, winner: tuple[Path, Path], decision: str, scores: dict[str, dict[str, float]],
                  tuned_pt: Path) -> str:
    """The validation's winner as ``out/model.pt`` with its card ``out/model.md``, whose first lines say which
    model it is and why; the fine-tuned weights stay in ``out/training/fine_tuned.pt`` (+ ``.md``) either way."""
    weights, card = winner
    with atomic_output(out / "model.pt") as tmp:
        shutil.copyfile(weights, tmp)
    scored = "; ".join(f"{name}: Jaccard {m['jaccard']:.3f}, RMSE {m['rmse_lat']:.1f} nm" for name, m in scores.items())
    head = (f"> Chosen by `decode_mem.fit`: the {decision}, copied from `{weights}`. Held-out matched windows: "
            f"{scored}. The fine-tuned weights are `{tuned_pt.relative_to(out)}` (card beside them).\n\n")
    with atomic_output(out / "model.md") as tmp:
        tmp.write_text(head + (card.read_text() if card.is_file() else ""))
    return str(out / "model.pt")


class _AfterFit(InferObserver):
    """``observer``, except that a domain warning's advice to fit a model is left out: this is that fit; the
    warning names the model it chose instead."""

    def __init__(self, observer: InferObserver, decision: str) -> None:
        self.inner, self.decision = observer, decision

    def warning(self, line: str) -> None:
        line = line.replace(", " + MODEL_FIX, "").replace(
            "Fix: " + MODEL_FIX.removeprefix("or "), f"decode_mem.fit localized it with the {self.decision}")
        self.inner.warning(line)

    def run_started(self, n_stacks: int) -> None:
        self.inner.run_started(n_stacks)

    def message(self, line: str) -> None:
        self.inner.message(line)

    def stack_started(self, stem: str, frames: int) -> None:
        self.inner.stack_started(stem, frames)

    def block_done(self, stem: str, frames: int, result: Any | None) -> None:
        self.inner.block_done(stem, frames, result)

    def stack_finished(self, stem: str) -> None:
        self.inner.stack_finished(stem)

    def run_finished(self) -> None:
        self.inner.run_finished()

    def stop_requested(self) -> bool:
        return self.inner.stop_requested()

    def memory_history(self) -> Any:
        return self.inner.memory_history()
