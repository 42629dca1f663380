"""The observers a training run shows and records: a progress bar and the MemoryTracker, hooked into ``fit``.

The CLI and the pipeline call ``train_observed``; ``fit`` itself knows neither tqdm nor MemoryTracker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from decode_mem.cli import progress_bars
from decode_mem.config import resolve_device
from decode_mem.memory import MemoryTracker
from decode_mem.train.config import TrainConfig
from decode_mem.train.distributed import Rank, rank_from_environment
from decode_mem.train.loop import CHECKPOINT, fit


def train_observed(cfg: TrainConfig) -> Path:
    """``fit(cfg)`` with a progress bar (unless ``cfg.quiet``) and, with ``cfg.memory_tracking``, the memory
    log ``cfg.memory_log_path`` sampled every step, plotted to ``<out>/memory.png`` and checked for leaks."""
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
                       disable=not progress_bars(cfg.quiet) or not rank.is_main)

    def on_step(step: int, row: dict[str, Any]) -> None:
        start()
        if tracker is not None:
            tracker.update(step=step, phase="train")
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
