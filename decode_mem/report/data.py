"""What a report can show: one small dataclass per section; a section that is None (or empty) is left out.

Callers fill in what they have — the pipeline everything, a batch of ``infer`` its stacks, memory and
command — and ``write_report`` renders only that. Nothing is estimated or filled in for a missing section.
"""

from __future__ import annotations

import math
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import numpy as np

VERSION_PACKAGES = ("decode_mem", "torch", "numpy", "scipy", "tifffile", "zarr", "dask", "matplotlib")


@dataclass(frozen=True)
class Images:
    """The widefield image (the mean frame, camera pixels) and/or the super-resolution image of the same field.

    ``pixel_size``: camera pixel in nm; ``render_pixel``: the super-resolution pixel in nm; ``zoom`` (µm): add a
    panel zoomed into the densest ``zoom`` × ``zoom`` µm (``'auto'``: its size from the image,
    ``render.auto.zoom_edge``); ``n_frames`` and ``n_locs`` label the panels.
    """

    pixel_size: float
    widefield: np.ndarray | None = None
    superres: np.ndarray | None = None
    render_pixel: float | None = None
    n_frames: int | None = None
    n_locs: int | None = None
    zoom: float | str | None = None

    def __post_init__(self) -> None:
        if self.widefield is None and self.superres is None:
            raise ValueError("Images: give a widefield image, a super-resolution image or both")


@dataclass(frozen=True)
class DriftCurve:
    """Stage drift per frame: ``frames`` 0-based (n,), ``dxdy`` (n, 2) nm — an estimate, or the truth alone.

    ``truth``: the true drift ``(frames, dxdy)`` where it is known (a simulation); the report then plots both
    and gives the RMSE of the estimate after removing each curve's mean (the offset is arbitrary).
    """

    frames: np.ndarray
    dxdy: np.ndarray
    label: str = "estimated drift"
    truth: tuple[np.ndarray, np.ndarray] | None = None


@dataclass(frozen=True)
class Quality:
    """Precision and resolution of one localization file without ground truth (``evaluate --no_truth``).

    ``rows``: (label, value) text; ``frc``: (label, frequency 1/nm, curve, resolution nm or None) per split;
    ``nena``: (label, distance centres nm, counts, fitted curve or None, value nm or None) per histogram;
    ``png``: the figure already drawn (e.g. ``<stem>_quality.png`` of a run), shown instead of drawing one.
    """

    label: str
    rows: Sequence[tuple[str, str]]
    frc: Sequence[tuple[str, np.ndarray, np.ndarray, float | None]] = ()
    nena: Sequence[tuple[str, np.ndarray, np.ndarray, np.ndarray | None, float | None]] = ()
    png: bytes | None = None


@dataclass(frozen=True)
class StackRow:
    """One stack of a batch: what the batch table shows."""

    stack: str
    frames: int
    localizations: int
    wall_s: float | None = None
    peak_rss_anon_mb: float | None = None
    warnings: tuple[str, ...] = ()
    status: str = "done"  # done | skipped | failed

    @property
    def frames_per_s(self) -> float | None:
        return self.frames / self.wall_s if self.wall_s and self.wall_s > 0 else None

    @classmethod
    def from_summary(cls, summary: Any) -> StackRow:
        """From an ``infer`` ``StackSummary`` (read by attribute: the report does not import infer)."""
        extra = getattr(summary, "extra", {}) or {}
        skipped = bool(getattr(summary, "skipped", False))
        return cls(str(summary.stack), int(summary.frames), int(summary.localizations),
                   None if skipped else float(summary.wall_s), summary.peak_rss_anon_mb,
                   tuple(str(w) for w in extra.get("domain_warnings", ())), "skipped" if skipped else "done")

    @classmethod
    def failed(cls, stack: str, reason: str) -> StackRow:
        """A stack that produced nothing, with the reason."""
        return cls(str(stack), 0, 0, warnings=(str(reason),), status="failed")


@dataclass(frozen=True)
class ReportData:
    """Everything a report may show (see the module docstring); every section is optional.

    - ``summary``: (label, value) rows shown first (model, device, wall time, ...);
    - ``metrics``: (label, value) rows, e.g. ``Metrics.rows()`` when ground truth exists;
    - ``images``, ``drift``: see :class:`Images`, :class:`DriftCurve`;
    - ``quality``: one :class:`Quality` per stack (precision and resolution without ground truth);
    - ``memory``: a memory history, ``MemoryTracker.history`` (``elapsed_s``, ``phase`` and the reading keys,
      one array each);
    - ``stacks``: one :class:`StackRow` per stack of a batch; ``warnings``: lines to show prominently;
    - ``figures``: (title, PNG bytes) shown as sections of their own after the images (e.g. the z-coloured image
      of a 3-D run, the PSF calibration, a followed run's localizations per frame and lag);
    - ``files``: (label, path) of the run's outputs (listed, linked relative to the report);
    - ``command``: the command line; ``versions``: (package, version) rows (default: :func:`collect_versions`).
    """

    title: str = "decode_mem report"
    summary: Sequence[tuple[str, str]] = ()
    metrics: Sequence[tuple[str, str]] = ()
    images: Images | None = None
    drift: DriftCurve | None = None
    quality: Sequence[Quality] = ()
    memory: Mapping[str, np.ndarray] | None = None
    stacks: Sequence[StackRow] = ()
    warnings: Sequence[str] = ()
    figures: Sequence[tuple[str, bytes]] = ()
    files: Sequence[tuple[str, str | os.PathLike]] = ()
    command: str | None = None
    versions: Sequence[tuple[str, str]] | None = field(default=None)


def collect_versions(packages: Sequence[str] = VERSION_PACKAGES) -> list[tuple[str, str]]:
    """(name, version) of Python, the platform and the installed ``packages`` (not imported: cheap)."""
    rows = [("python", sys.version.split()[0]), ("platform", platform.platform()), ("cpu", _cpu_name()),
            ("cpu cores", str(os.cpu_count()))]
    for name in packages:
        try:
            rows.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            rows.append((name, "not installed"))
    return rows


def format_mb(value: float | None) -> str:
    """``'123 MB'``, or ``'n/a'`` for a missing reading."""
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.0f} MB"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
