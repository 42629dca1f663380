"""Drift tables: ``frame`` (1-based), ``dx [nm]``, ``dy [nm]`` per frame — the drift that, subtracted from a
localization's position in that frame, gives its position in the sample.

The simulator writes the true drift of a movie in this form (``<gt stem>_drift.csv``) and the drift
correction writes its estimate in it, so the two compare row by row.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType

import numpy as np

from decode_mem.errors import StackError, exception_line
from decode_mem.io.atomic import atomic_output

DRIFT_COLUMNS = ("frame", "dx [nm]", "dy [nm]")


def drift_path(gt: str | os.PathLike) -> Path:
    """``<gt stem>_drift.csv`` beside the ground truth (or localization) file ``gt``."""
    gt = Path(gt)
    return gt.with_name(f"{gt.stem}_drift.csv")


class DriftWriter:
    """Streaming, atomic: ``write(frames, dxdy)`` appends rows (0-based ``frames``, (n, 2) nm)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._atomic = ExitStack()
        self._fh = None

    def __enter__(self) -> DriftWriter:
        tmp = self._atomic.enter_context(atomic_output(self.path))
        self._fh = open(tmp, "w", newline="")
        self._fh.write(",".join(f'"{h}"' for h in DRIFT_COLUMNS) + "\n")
        return self

    def write(self, frames: np.ndarray, dxdy: np.ndarray) -> None:
        frames = np.asarray(frames, dtype=np.int64).reshape(-1)
        dxdy = np.asarray(dxdy, dtype=np.float64).reshape(-1, 2)
        data = np.column_stack([frames + 1, dxdy])
        np.savetxt(self._fh, data, fmt=["%d", "%.4f", "%.4f"], delimiter=",")

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._fh.close()
        self._atomic.__exit__(exc_type, exc, tb)


def write_drift_csv(path: str | os.PathLike, frames: np.ndarray, dxdy: np.ndarray) -> Path:
    """Write a whole drift table atomically (0-based ``frames``, (n, 2) nm)."""
    with DriftWriter(path) as writer:
        writer.write(frames, dxdy)
    return Path(path)


def read_drift_csv(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """``(frames 0-based int64 (n,), dxdy (n, 2) nm)`` from a drift table; StackError if it is not one."""
    path = Path(path)
    try:
        with open(path, newline="") as fh:
            header = [h.strip().strip('"') for h in fh.readline().strip().split(",")]
            if header[:3] != list(DRIFT_COLUMNS):
                raise StackError(f"{path}: not a drift table (columns {header[:3]}, expected {list(DRIFT_COLUMNS)})")
            data = np.loadtxt(fh, delimiter=",", usecols=(0, 1, 2), ndmin=2)
    except OSError as e:
        raise StackError(f"{path}: cannot read the drift table ({e.strerror or e})") from None
    except ValueError as e:
        raise StackError(f"{path}: bad drift table ({exception_line(e, with_type=False)})") from None
    return data[:, 0].astype(np.int64) - 1, data[:, 1:3]


def describe_drift(dxdy: np.ndarray) -> str:
    """A drift curve (frames x 2, nm) in the words every job and the report use: its span per axis (largest minus
    smallest) and its net change from the first to the last frame."""
    dxdy = np.asarray(dxdy, dtype=np.float64).reshape(-1, 2)
    if len(dxdy) == 0:
        return "no drift measured (no frames)"
    span = dxdy.max(axis=0) - dxdy.min(axis=0)
    net = dxdy[-1] - dxdy[0]
    return (f"drift span {span[0]:.1f} nm in x, {span[1]:.1f} nm in y; first to last frame "
            f"{net[0]:+.1f} nm in x, {net[1]:+.1f} nm in y")
