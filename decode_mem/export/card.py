"""Export a trained run as a shippable model: weights + metadata (no optimizer state) and a model card.

``python -m decode_mem.export runs/default_2d --out data/models/default_2d`` writes
``default_2d.pt`` and ``default_2d.md``: the card opens with what a microscopist looks for, the data the model
covers (its envelope) and how well it does (validation at several densities of a reference physics where it applies,
and on its own training simulation), then how it was made (steps, time, hardware, config).
"""

from __future__ import annotations

import csv
import platform
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from decode_mem.errors import CheckpointError
from decode_mem.io.atomic import atomic_output
from decode_mem.model.checkpoint import build_net, load_checkpoint, save_checkpoint
from decode_mem.model.loss import DecodeLoss, LossConfig
from decode_mem.simulate.config import SimulationConfig
from decode_mem.simulate.dataset import simulate_samples
from decode_mem.train.validation import validate

DENSITIES = (0.2, 1.0, 2.0)  # emitters / µm²: low, medium, high
EVAL_SEED = 12345  # not the training seed: the card's sets are not the validation set used in training


def export_model(run_dir: Path, out_stem: Path, *, densities: Sequence[float] = DENSITIES, n_eval: int = 256,
                 frame_size: tuple[int, int] = (64, 64)) -> tuple[Path, Path]:
    """Write ``<out_stem>.pt`` (inference checkpoint) and ``<out_stem>.md`` (model card) from a training run."""
    src = run_dir / "model.pt" if (run_dir / "model.pt").exists() else run_dir / "checkpoint.pt"
    state = load_checkpoint(src)
    net = build_net(state, src).eval()
    train_state = load_checkpoint(run_dir / "checkpoint.pt").get("train_state") or {}
    if "config" not in train_state:
        raise CheckpointError(f"{run_dir / 'checkpoint.pt'}: holds no training config to describe the model")
    train_cfg = train_state["config"]
    sim = SimulationConfig.from_dict(state["meta"]["simulation"])
    loss_fn = DecodeLoss(LossConfig.from_dict(train_cfg["loss"]), net.config)
    step = int(state["meta"]["step"])
    model_path = save_checkpoint(out_stem.with_suffix(".pt"), net=net, camera=sim.camera,
                                 simulation=sim.to_dict(), step=step)
    def score(eval_sim: SimulationConfig) -> dict:
        val = simulate_samples(eval_sim, n_eval, seed=EVAL_SEED)
        return validate(net, val, loss_fn, batch_size=16, device=torch.device("cpu"), amp_dtype=None,
                        pixel_size=eval_sim.camera.pixel_size)

    reference = SimulationConfig(frame_size=frame_size)  # EMCCD, σ 1 px, 100 nm px, 5000 ± 1500 photons, bg 100
    gap = reference_gap(sim, net.config)
    rows = [] if gap else [(density, score(replace(reference, density=float(density)))) for density in densities]
    own = score(replace(sim, frame_size=frame_size))  # the model's own training simulation, ranges and all
    card = _card(out_stem.name, src, train_cfg, step, *_train_time(run_dir), train_state.get("hardware", "unknown"),
                 rows, own, state["meta"].get("envelope"), n_eval, frame_size, _base_steps(train_cfg.get("init_from")),
                 gap)
    card_path = out_stem.with_suffix(".md")
    with atomic_output(card_path) as tmp:
        tmp.write_text(card)
    return model_path, card_path


def reference_gap(simulation: SimulationConfig, model_config: Any) -> str | None:
    """Why the card's reference physics (a 2-D Gaussian PSF) says nothing of a model, or None where it does: a model
    trained on another PSF model (a 3-D spline or pupil PSF) or on a PSF that changes across the field would be scored
    on spots it was never meant to read (a field model also without its place in the field)."""
    if getattr(model_config, "field_shape", None) is not None:
        return "its PSF changes across the field; the reference is one 2-D Gaussian PSF"
    if simulation.psf != "gauss2d":
        kind = "3-D model" if getattr(model_config, "use_z", False) else "model"
        return f"a {kind} trained on the PSF '{simulation.psf}'; the reference is a 2-D Gaussian PSF"
    return None


def _base_steps(init_from: str | None) -> int | None:
    """Optimizer steps of the model a fine-tuning run started from (None: not a fine-tuning, or not found)."""
    if not init_from or not Path(init_from).exists():
        return None
    return int(load_checkpoint(Path(init_from))["meta"]["step"])


def _train_time(run_dir: Path) -> tuple[float, int]:
    """Wall time summed over the run's segments (time_s restarts at 0 after each --resume), and the optimizer
    steps those rows account for: steps between two rows more than two log intervals apart (rows the log does not
    have: a run continued from a snapshot, or rows an older TrainLog lost to a kill) are not counted, nor their
    time."""
    log = run_dir / "train_log.csv"
    if not log.exists():
        return float("nan"), 0
    with open(log, newline="") as fh:
        rows = [(int(r["step"]), float(r["time_s"])) for r in csv.DictReader(fh)]
    if not rows:
        return float("nan"), 0
    gaps = np.diff([0] + [step for step, _ in rows])
    reach = 2 * max(int(np.median(gaps)), 1)
    total, steps, last = 0.0, 0, (0, 0.0)
    for gap, (step, t) in zip(gaps, rows, strict=True):
        if gap <= reach:
            total += t - last[1] if t >= last[1] else t  # a new segment's clock starts at 0
            steps += int(gap)
        last = (step, t)
    return total, steps


# the envelope's keys (``simulate.derived.envelope``) as a microscopist reads them: label, unit
ENVELOPE_ROWS = {
    "psf": ("PSF model", ""),
    "psf_file": ("PSF file", ""),
    "z_range_nm": ("z range", "nm"),
    "psf_sigma_px": ("PSF width (σ)", "px"),
    "pixel_size_nm": ("camera pixel", "nm"),
    "photons": ("photons per emitter per frame", ""),
    "background_photons": ("background", "photons/px per frame"),
    "background_kinds": ("background shapes", ""),
    "camera_kinds": ("cameras", ""),
    "density_per_um2": ("density", "emitters/µm² per frame"),
    "on_time_frames": ("on-time", "frames"),
}


def envelope_table(envelope: dict | None) -> list[str]:
    """The envelope as a two-column markdown table, ranges as ``lo–hi unit`` (keys without a label as they are)."""
    if not envelope:
        return ["Not recorded (a format-1 checkpoint)."]
    rows = ["| | trained on |", "|---|---|"]
    for key, value in envelope.items():
        label, unit = ENVELOPE_ROWS.get(key, (key, ""))
        if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int | float) for v in value):
            text = f"{value[0]:g}" if value[0] == value[1] else f"{value[0]:g}–{value[1]:g}"
        elif isinstance(value, list | tuple):
            text = ", ".join(str(v) for v in value)
        else:
            text = str(value)
        rows.append(f"| {label} | {text}{' ' + unit if unit else ''} |")
    return rows


def _card(name: str, src: Path, cfg: dict, step: int, seconds: float, logged: int, trained_on: str, rows: list,
          own: dict, envelope: dict | None, n_eval: int, frame_size: tuple[int, int], base_steps: int | None,
          gap: str | None = None) -> str:
    """The card a microscopist reads top down: what data the model covers, how well it does, then how it was made."""
    table = ["| density (/µm²) | Jaccard | recall | precision | RMSE lateral (nm) |", "|---|---|---|---|---|"]
    for density, m in rows:
        table.append(f"| {density:g} | {m['jaccard']:.3f} | {m['recall']:.3f} | {m['precision']:.3f} | "
                     f"{m['rmse_lat']:.1f} |")
    hardware = (f"{platform.machine()} CPU, {torch.get_num_threads()} torch threads"
                if not torch.cuda.is_available() else torch.cuda.get_device_name(0))
    return "\n".join([
        f"# Model card: {name}",
        "",
        "## Envelope: the data it covers",
        "",
        "The physics it was trained on; `infer` warns where a movie falls outside it (`load_model(...).envelope` in "
        "Python).",
        "",
        *envelope_table(envelope),
        "",
        f"## How well it does ({n_eval} simulated windows of {frame_size[0]}×{frame_size[1]} px per row; seed "
        f"{EVAL_SEED}, not the training seed)",
        "",
        "Post-processing defaults (`PostprocessConfig()`); matching within 250 nm (SMLM challenge 2016).",
        "",
        *(["Reference physics (EMCCD, PSF σ 1 px, 100 nm pixels, 5000 ± 1500 photons, background 100 photons/px — "
           "what the earlier narrow model was trained on) at three densities:", "", *table, ""] if not gap else
          [f"Reference physics (a 2-D Gaussian PSF on an EMCCD): not evaluated: {gap}.", ""]),
        f"Its own training simulation (every range of the envelope, drawn per window): Jaccard {own['jaccard']:.3f}, "
        f"recall {own['recall']:.3f}, precision {own['precision']:.3f}, lateral RMSE {own['rmse_lat']:.1f} nm "
        "(pixels converted at the camera's nominal pixel size).",
        "",
        "## How it was made",
        "",
        f"Trained with `python -m decode_mem.train` (source run: `{src}`), exported with "
        f"`python -m decode_mem.export`.",
        "",
        f"- optimizer steps: {step} (batch {cfg.get('batch_size')} × accumulation {cfg.get('accumulation_steps')})"
        + (f"; the run's last saved config asked for {cfg.get('steps')}: it was stopped at step {step} and "
           f"finished there with `--steps {step} --resume`" if cfg.get("steps") and int(cfg["steps"]) != step else ""),
        *([f"- started from the weights of `{cfg['init_from']}`"
           + (f" ({base_steps} steps of its own run)" if base_steps is not None else " (not found at export)")
           + ": the steps and wall time here are this run's only"] if cfg.get("init_from") else []),
        f"- training wall time: {seconds / 60:.1f} min on {trained_on}"
        + (f" (the run's log covers {logged} of the {step} steps: the rest ran on other machines or their rows "
           "were lost)" if logged < step - 2 * int(cfg.get("log_every") or 50) else ""),
        f"- exported on: {hardware}; python {platform.python_version()}, torch {torch.__version__}",
        "",
        "## Training config",
        "",
        "```yaml",
        yaml.safe_dump(cfg, sort_keys=False).rstrip(),
        "```",
        "",
    ])
