"""One wall-clock budget for the whole ``fit`` command: training gets what the other stages leave of it.

``fit --budget_minutes M`` promises the command, not only its training, in M minutes. What comes before training
(calibration, setting up, simulating the validation windows) is measured as it happens; what comes after it is
predicted by timing the real work at a small scale just before training, with the network that will be trained
(training changes its weights, not its speed):

- localization: ``predict_stack`` on the first movie's first ``PROBE_FRAMES`` frames (a short and a longer run,
  after an untimed one that pays the once-per-run costs) gives seconds per frame-pixel (the slope) and a fixed
  cost per movie (the intercept), scaled to every movie's frames and pixels. Each length is timed
  ``PROBE_REPEATS`` times, interleaved, and the fastest kept: one stall (another process, the page cache) in the
  longer probe alone made the slope, and the prediction, 3.5x too large on a CI machine;
- validation and the model card: simulating and validating ``PROBE_WINDOWS`` windows at the card's frame size,
  scaled to the windows they use.

``MARGIN_SHARE`` of the budget stays free for what is not predicted (the training loop's own set-up and its last
step, the probes' error): without it a 30-minute fit took 30.1 min (``benchmarks/results/3d.md``'s run).
``fit.json`` keeps the split and what the stages after training really took, so the prediction can be checked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import torch

from decode_mem.export.card import DENSITIES, reference_gap
from decode_mem.io.stack import open_stack
from decode_mem.model.loss import DecodeLoss, LossConfig
from decode_mem.simulate.config import SimulationConfig
from decode_mem.simulate.dataset import simulate_samples
from decode_mem.train.validation import validate

PROBE_FRAMES = (16, 64)  # the two localization probes (frames of the first movie)
PROBE_REPEATS = 2  # times each probe is timed (interleaved); the fastest is kept
PROBE_WINDOWS = 16  # windows simulated and validated to time validation and the card
CARD_FRAME = (64, 64)  # the model card's evaluation windows (``export_model``'s frame size)
PROBE_SEED = 424_242
MIN_TRAIN_SHARE = 0.2  # training never gets less than this share of the budget (a too-small budget is warned of)
MARGIN_SHARE = 0.02  # kept free for what is not predicted: training's own set-up, its last step, probe error


@dataclass(frozen=True)
class BudgetSplit:
    """Seconds of one ``fit`` budget: spent before training, predicted after it, and what training gets."""

    budget_s: float
    spent_s: float
    localize_s: float
    evaluate_s: float

    @property
    def after_s(self) -> float:
        return self.localize_s + self.evaluate_s

    @property
    def margin_s(self) -> float:
        return MARGIN_SHARE * self.budget_s

    @property
    def train_s(self) -> float:
        """What is left for training (less ``MARGIN_SHARE``), never below ``MIN_TRAIN_SHARE`` of the budget."""
        return max(MIN_TRAIN_SHARE * self.budget_s, self.budget_s - self.spent_s - self.after_s - self.margin_s)

    @property
    def fits(self) -> bool:
        """Whether the budget holds the stages around training and at least ``MIN_TRAIN_SHARE`` of training."""
        return self.budget_s - self.spent_s - self.after_s - self.margin_s >= MIN_TRAIN_SHARE * self.budget_s

    def as_dict(self) -> dict[str, float]:
        return {"budget_s": round(self.budget_s, 1), "spent_before_training_s": round(self.spent_s, 1),
                "predicted_localize_s": round(self.localize_s, 1), "predicted_evaluate_s": round(self.evaluate_s, 1),
                "margin_s": round(self.margin_s, 1), "train_s": round(self.train_s, 1)}

    def warning(self) -> str:
        return (f"the budget of {self.budget_s / 60:.3g} min does not hold this fit: {self.spent_s:.0f} s went to "
                f"calibration and set-up, and localizing and validating are predicted to take {self.after_s:.0f} s; "
                f"training gets {self.train_s / 60:.3g} min (the least it is given), so the command will take about "
                f"{(self.spent_s + self.after_s + self.train_s) / 60:.3g} min. Fix: a larger --budget_minutes")


def split_budget(budget_minutes: float, started: float, net: torch.nn.Module, movies: tuple[str, ...], camera: Any,
                 simulation: SimulationConfig, device: torch.device, *, validation_windows: int,
                 card_windows: int, infer_sizes: dict[str, Any]) -> BudgetSplit:
    """The split of ``budget_minutes`` for a command that started at ``started`` (``time.perf_counter``).

    ``validation_windows``: windows validated after training (all models, already simulated);
    ``card_windows``: windows the model card simulates and scores (per evaluation, ``export_model``'s n_eval);
    ``infer_sizes``: the localization's chunk/batch/memory settings (``predict_stack`` keywords).
    """
    localize = localize_seconds(net, movies, camera, device, infer_sizes)
    evaluate = evaluate_seconds(net, simulation, device, validation_windows=validation_windows,
                                card_windows=card_windows)
    return BudgetSplit(60.0 * budget_minutes, time.perf_counter() - started, localize, evaluate)


def localize_seconds(net: torch.nn.Module, movies: tuple[str, ...], camera: Any, device: torch.device,
                     infer_sizes: dict[str, Any]) -> float:
    """Predicted seconds to localize every movie: two timed ``predict_stack`` runs on the first movie's first
    frames give a cost per frame-pixel and a fixed cost per movie."""
    from decode_mem.infer.predict import predict_stack

    shapes, frames = [], None
    for movie in movies:
        with open_stack(movie) as stack:
            shapes.append(stack.shape)
            if frames is None:  # the probes' frames: the first movie's first
                frames = stack.read(0, min(PROBE_FRAMES[1], stack.shape[0]))
    lengths = tuple(sorted({min(n, len(frames)) for n in PROBE_FRAMES}))
    fastest = {n: float("inf") for n in lengths}
    runs = (lengths[0],) + lengths * PROBE_REPEATS  # the first, untimed, pays the once-per-run costs (kernels, planner)
    for i, n in enumerate(runs):
        t0 = time.perf_counter()
        for _ in predict_stack(frames[:n], net, camera=camera, device=device, compile=False, **infer_sizes):
            pass
        if i:
            fastest[n] = min(fastest[n], time.perf_counter() - t0)
    seconds = [fastest[n] for n in lengths]
    pixels = frames.shape[1] * frames.shape[2]
    if len(lengths) == 2:
        per_frame_pixel = max(0.0, (seconds[1] - seconds[0]) / ((lengths[1] - lengths[0]) * pixels))
        fixed = max(0.0, seconds[0] - per_frame_pixel * lengths[0] * pixels)
    else:  # a movie shorter than the first probe: all of it is cost per frame
        per_frame_pixel, fixed = seconds[0] / (lengths[0] * pixels), 0.0
    return sum(fixed + per_frame_pixel * t * h * w for t, h, w in shapes)


def evaluate_seconds(net: torch.nn.Module, simulation: SimulationConfig, device: torch.device, *,
                     validation_windows: int, card_windows: int) -> float:
    """Predicted seconds of validation (``validation_windows`` already simulated at the simulation's frame size)
    and of the model card (``card_windows`` per evaluation at ``CARD_FRAME``, ``card_evaluations`` of them, each
    simulated and scored)."""
    t0 = time.perf_counter()
    probe = simulate_samples(replace(simulation, frame_size=CARD_FRAME), PROBE_WINDOWS, seed=PROBE_SEED)
    simulate_s = time.perf_counter() - t0
    cpu = torch.device("cpu")
    card_s = _validate_seconds(net, probe, simulation, cpu)  # ``export_model`` scores on the CPU
    val_s = card_s if device == cpu else _validate_seconds(net, probe, simulation, device)
    net.to(device)
    area = simulation.frame_size[0] * simulation.frame_size[1] / (CARD_FRAME[0] * CARD_FRAME[1])
    return (validation_windows * val_s / PROBE_WINDOWS * area
            + card_windows * card_evaluations(simulation, net.config) * (simulate_s + card_s) / PROBE_WINDOWS)


def card_evaluations(simulation: SimulationConfig, model_config: Any) -> int:
    """Evaluations the model card makes: one per reference density where the reference applies, and the model's own
    simulation (``export.card``)."""
    return (0 if reference_gap(simulation, model_config) else len(DENSITIES)) + 1


def _validate_seconds(net: torch.nn.Module, windows: dict[str, torch.Tensor], simulation: SimulationConfig,
                      device: torch.device) -> float:
    loss = DecodeLoss(LossConfig(), net.config)
    t0 = time.perf_counter()
    validate(net.to(device), windows, loss, batch_size=PROBE_WINDOWS, device=device, amp_dtype=None,
             pixel_size=simulation.camera.pixel_size)
    return time.perf_counter() - t0
