"""Drift-correct a localization file: estimate the drift, write the corrected file, the drift table and its plot.

``correct_file(LOCS, DIR)`` reads ``LOCS`` (any format ``decode_mem.io.localizations`` reads) twice, in bounded
chunks: once for frame, x and y (12 bytes per localization), once to write the corrected rows. It writes

* ``DIR/<stem>_undrift<suffix>``: the localizations minus the drift of their frame, in the input's format (a
  rapidSTORM table's as ThunderSTORM CSV; Picasso's own name for a corrected file; the columns decode_mem reads
  are kept);
* ``DIR/<stem>_drift.csv``: ``frame`` (1-based), ``dx [nm]``, ``dy [nm]`` — the drift that was subtracted;
* ``DIR/<stem>_drift.png``: the drift curve (with the truth dashed when a true drift table is given).

Every file appears complete under its name or not at all.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from decode_mem.drift.config import DriftConfig
from decode_mem.drift.estimate import DriftEstimate, Progress, estimate_drift
from decode_mem.errors import ConfigError, StackError
from decode_mem.io.atomic import atomic_output
from decode_mem.io.drift import read_drift_csv, write_drift_csv
from decode_mem.io.localizations import (
    IN_PIXELS,
    LocalizationMeta,
    iter_localizations,
    localization_meta,
    open_writer,
    working_unit,
    written_as,
)
from decode_mem.io.table import OPTIONAL, EmitterTable


@dataclass(frozen=True)
class DriftResult:
    """What ``correct_file`` wrote and estimated."""

    corrected: Path
    table: Path
    plot: Path
    estimate: DriftEstimate
    localizations: int


def corrected_path(path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """``DIR/<stem>_undrift<suffix>``, the suffix of the format it is written in (``io.localizations.written_as``)."""
    path = Path(path)
    suffix = written_as(path)[1] if path.is_file() else path.suffix
    return Path(out_dir) / f"{path.stem}_undrift{suffix}"


def correct_file(path: str | os.PathLike, out_dir: str | os.PathLike, config: DriftConfig | None = None, *,
                 pixel_size: float | None = None, truth: str | os.PathLike | None = None,
                 estimate: DriftEstimate | None = None, progress: Progress | None = None) -> DriftResult:
    """Estimate the drift of the localizations in ``path`` (or take ``estimate``, e.g. one made from the same
    localizations in another format) and write the corrected file, table and plot."""
    path, out_dir = Path(path), Path(out_dir)
    fmt = written_as(path)[0]
    meta = localization_meta(path)
    unit = working_unit(path, pixel_size)  # 1 nm for a file in nm: its nm go back out as they came
    frame, x, y, extras, three_d = _positions(path, unit)
    if estimate is None:
        # a file may hold frames beyond the count it records (SMAP's numberOfFrames: 1000, its last frame 1001)
        n_frames = None if meta.frames is None else max(meta.frames, int(frame.max()) + 1)
        estimate = estimate_drift(frame, x, y, config, n_frames=n_frames, progress=progress)
    del frame, x, y
    out_dir.mkdir(parents=True, exist_ok=True)
    corrected = corrected_path(path, out_dir)
    if corrected.resolve() == path.resolve():
        raise ConfigError(f"{path}: the corrected file would overwrite the input; choose another --out")
    shift = lambda table: _shifted(table, estimate, unit)  # noqa: E731
    n = _rewrite(path, corrected, fmt, unit, meta, extras, three_d, shift, estimate)
    table = out_dir / f"{path.stem}_drift.csv"
    write_drift_csv(table, estimate.frames, estimate.dxdy)
    plot = out_dir / f"{path.stem}_drift.png"
    write_drift_plot(plot, estimate, truth)
    return DriftResult(corrected, table, plot, estimate, n)


def write_drift_plot(path: Path, estimate: DriftEstimate, truth: str | os.PathLike | None = None) -> Path:
    """The drift curve as PNG (the report's figure), with a true drift table dashed when given."""
    from decode_mem.report.data import DriftCurve
    from decode_mem.report.figures import drift_png

    curve = DriftCurve(estimate.frames, estimate.dxdy, label=f"estimated ({estimate.method})",
                       truth=read_drift_csv(truth) if truth is not None else None)
    png = drift_png(curve)
    with atomic_output(path) as tmp:
        tmp.write_bytes(png)
    return path


def _positions(path: Path, unit: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...], bool]:
    """frame (int32), x, y (float32 nm) of every localization, the optional columns the file has and whether
    any z is not 0 (the corrected file keeps z only then: a 2-D file gets no z column)."""
    frames, xs, ys = [], [], []
    extras: tuple[str, ...] = ()
    three_d = False
    for table in iter_localizations(path, pixel_size=unit):
        three_d = three_d or bool(np.any(table["z"] != 0))
        frames.append(table["frame"].astype(np.int32))
        xs.append((table["x"] * unit).astype(np.float32))
        ys.append((table["y"] * unit).astype(np.float32))
        extras = tuple(c for c in OPTIONAL if c in table)
    if not frames or sum(len(f) for f in frames) == 0:
        raise StackError(f"{path}: holds no localizations")
    return np.concatenate(frames), np.concatenate(xs), np.concatenate(ys), extras, three_d


def _shifted(table: EmitterTable, estimate: DriftEstimate, unit: float) -> EmitterTable:
    d = estimate.at(table["frame"]) / unit
    return EmitterTable({**table.columns, "x": table["x"] - d[:, 0], "y": table["y"] - d[:, 1]})


def _rewrite(path: Path, out: Path, fmt: str, unit: float, meta: LocalizationMeta, extras: tuple[str, ...],
             three_d: bool, shift: Callable[[EmitterTable], EmitterTable], estimate: DriftEstimate) -> int:
    """Stream ``path`` into ``out`` (format ``fmt``) with every chunk corrected; returns the row count."""
    options: dict = {"three_d": three_d, "fmt": fmt}
    n = 0
    width, height = meta.width, meta.height
    if fmt == "picasso":
        if width is None or height is None:
            raise StackError(f"{path}: the Picasso metadata lacks the frame width/height")
        options["info"] = {"Generated by": "decode_mem.drift", "Drift method": estimate.method}
    camera = unit if fmt in IN_PIXELS else meta.pixel_size  # a file in pixels is read in its own
    with open_writer(out, pixel_size=camera, unit=unit, width=width, height=height, frames=meta.frames,
                     extras=extras, **options) as writer:
        for table in iter_localizations(path, pixel_size=unit):
            writer.write(shift(table))
            n += len(table)
    return n
