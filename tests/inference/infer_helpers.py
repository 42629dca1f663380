"""Shared paths, stack writers and observers for the inference tests (a plain module: conftest is not importable)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tifffile

from decode_mem.infer.observe import InferObserver

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample" / "stack.tif"
GT = REPO / "data" / "sample" / "gt.csv"
DEFAULT_MODEL = REPO / "data" / "models" / "default_2d.pt"


def write_stacks(folder: Path, frames: np.ndarray, n: int, length: int) -> list[Path]:
    """``n`` stacks of ``length`` frames (different cuts of ``frames``), alternately .npy and .tif."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        cut = np.roll(frames, -37 * i, axis=0)[:length]
        path = folder / f"s{i}.{'npy' if i % 2 == 0 else 'tif'}"
        if path.suffix == ".npy":
            np.save(path, cut)
        else:
            tifffile.imwrite(path, cut)
        paths.append(path)
    return paths


class WarningLines(InferObserver):
    """Keeps a run's warning lines, in order."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def warning(self, line: str) -> None:
        self.lines.append(line)


def executor_outputs(model, frames: np.ndarray, engine=None) -> dict:
    """Every (tile, frame) output of the tiled executor with ``engine`` (None: torch) as a tensor: 32² tile cores, two
    windows per call (features carried)."""
    import torch

    from decode_mem.tiling import ArrayStack, TiledExecutor
    from decode_mem.tiling.config import TileConfig

    ex = TiledExecutor(model.net.eval(), frames.shape[1:], TileConfig(chunk_size=32, batch_size=2),
                       camera=model.camera, engine=engine)
    out = {}

    def consume(tile, ids, output):
        for i, f in enumerate(ids):  # a runtime that takes arrays gives arrays (``TiledExecutor.arrays``)
            o = output[i]
            out[(tile.index, int(f))] = torch.tensor(o) if isinstance(o, np.ndarray) else o.float().clone()

    for _ in ex.run(ArrayStack(frames), consume, prefetch_depth=0):
        pass
    return out
