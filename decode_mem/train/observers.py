"""The observers a training run shows and records: a progress bar and the MemoryTracker, hooked into ``fit``.

The CLI calls ``train_observed``; ``fit`` itself knows neither tqdm nor MemoryTracker. Where no bar is drawn
(stderr not a terminal: a log file, a pipe, the pipeline's lines) ``ProgressLines`` prints a plain line now
and then with the steps done, the time so far and the time left.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from decode_mem.cli import progress_bars
from decode_mem.config import resolve_device
from decode_mem.memory import MemoryTracker
from decode_mem.train.config import TrainConfig
from decode_mem.train.distributed import Rank, rank_from_environment
from decode_mem.train.loop import CHECKPOINT, fit


def duration(seconds: float) -> str:
    """``'45 s'``, ``'12 min 5 s'``, ``'2 h 3 min'``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


class ProgressLines:
    """``on_step`` for a log or a pipe: a line at the first step, then one every ``every`` seconds, saying the
    step, the time so far and the time left (from the pace of the steps after the first, which carries the
    start-up, or what remains of ``budget_s`` for a run that trains for a time budget, not a number of steps)."""

    def __init__(self, steps: int | None, echo: Callable[[str], object], *, prefix: str = "train",
                 every: float = 30.0, budget_s: float | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.steps, self.echo, self.prefix, self.every, self.budget_s, self.clock = (
            steps, echo, prefix, every, budget_s, clock)
        self.started = clock()
        self.first: tuple[int, float] | None = None  # (step, time) of the first step seen (resumed: not 1)
        self.last_line = -float("inf")

    def __call__(self, step: int, row: dict[str, Any]) -> None:
        now = self.clock()
        if self.first is None:
            self.first = (step, now)  # the pace is measured from here: the start-up is not a step
        if now - self.last_line < self.every and step != self.steps:
            return
        self.last_line = now
        spent = now - self.started
        if self.budget_s is not None:
            left = f"{duration(self.budget_s - spent)} left of the {duration(self.budget_s)} budget"
            where = f"step {step}"
        else:
            where = f"step {step} of {self.steps} ({100 * step / self.steps:.0f} %)"
            if step >= self.steps:
                left = "done"
            elif step > self.first[0]:
                left = f"about {duration((now - self.first[1]) / (step - self.first[0]) * (self.steps - step))} left"
            else:
                left = "time left: from the next line on"
        loss = f", loss {row['loss']:.3g}" if "loss" in row else ""
        self.echo(f"[{self.prefix}] {where}, {duration(spent)} so far, {left}{loss}")


def train_observed(cfg: TrainConfig, echo: Callable[[str], object] | None = None) -> Path:
    """``fit(cfg)`` with a progress bar (unless ``cfg.quiet``) and, with ``cfg.memory_tracking``, the memory
    log ``cfg.memory_log_path`` sampled every step, plotted to ``<out>/memory.png`` and checked for leaks.
    Where no bar is drawn (not a terminal) but not quiet, or where ``echo`` is given (the pipeline's lines),
    ``ProgressLines`` reports progress and the time left instead."""
    resumed = cfg.resume and (cfg.out_dir / CHECKPOINT).exists()
    rank = rank_from_environment()
    tracker: MemoryTracker | None = None
    bar: tqdm | None = None

    def start() -> None:
        """Made at the first step (or after a run with none left): a run refused by its memory plan leaves
        nothing behind."""
        nonlocal tracker, bar
        if bar is None:
            tracker = _tracker(cfg, rank, resumed) if cfg.memory_tracking else None
            bar = tqdm(total=cfg.steps, desc="train", unit="step",
                       disable=echo is not None or not progress_bars(cfg.quiet) or not rank.is_main)

    lines: ProgressLines | None = None
    if rank.is_main and (echo is not None or (not cfg.quiet and not progress_bars(cfg.quiet))):
        lines = ProgressLines(cfg.steps, echo or (lambda line: print(line, file=sys.stderr, flush=True)))

    def on_step(step: int, row: dict[str, Any]) -> None:
        start()
        if tracker is not None:
            tracker.update(step=step, phase="train")
        if lines is not None:
            lines(step, row)
        bar.n = step
        bar.set_postfix(loss=f"{row['loss']:.3g}", count=f"{row['count']:.3g}",
                        **({"jaccard": f"{row['jaccard']:.3f}"} if "jaccard" in row else {}), refresh=False)
        bar.refresh()

    try:
        model_path = fit(cfg, on_step=on_step)
        start()
        bar.close()
        if tracker is not None:
            tracker.update(step=cfg.steps, phase="end", force_log=True)
            if rank.is_main:
                tracker.plot_history(cfg.out_dir / "memory.png")
            tracker.check_leak()
    finally:
        if bar is not None:
            bar.close()
        if tracker is not None:
            tracker.close()
    return model_path


def _tracker(cfg: TrainConfig, rank: Rank, resumed: bool) -> MemoryTracker:
    """The memory log: under torchrun rank 0 writes memory.csv, rank r memory_rank<r>.csv."""
    path = cfg.memory_log_path
    if not rank.is_main:
        path = path.with_name(f"{path.stem}_rank{rank.rank}{path.suffix}")
    device = resolve_device(cfg.device)
    if device.type == "cuda" and rank.distributed:
        device = f"cuda:{rank.local_rank}"
    return MemoryTracker(path, log_interval=cfg.log_every, device=device, mode="a" if resumed else "w")
