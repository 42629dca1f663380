"""The report's figures as PNG bytes (matplotlib Figures without pyplot: no global state, no display)."""

from __future__ import annotations

import importlib
import io
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from decode_mem.report.data import DriftCurve, Images, Quality

if TYPE_CHECKING:
    from matplotlib.figure import Figure

HOST_SERIES = (("rss_anon_mb", "RssAnon"), ("vm_rss_mb", "VmRSS"), ("rss_file_mb", "RssFile"))
GPU_SERIES = (("cuda_allocated_mb", "CUDA allocated"), ("cuda_reserved_mb", "CUDA reserved"),
              ("nvml_used_mb", "NVML used (whole device)"))
# what drawing the figures imports (``_figure``, ``_shade_phases``, ``render.widefield.side_by_side_figure``)
FEW_READINGS = 30  # a memory history of at most this many readings is drawn with a dot at each
DRAWING_MODULES = ("matplotlib.figure", "matplotlib.backends.backend_agg", "matplotlib.patches",
                   "matplotlib.font_manager", "mpl_toolkits.axes_grid1.anchored_artists",
                   "scipy.ndimage")  # the super-resolution overview's smoothing (``render.widefield.overview``)


def import_drawing_modules() -> threading.Thread:
    """Start importing ``DRAWING_MODULES`` (matplotlib ~0.4 s, scipy.ndimage ~0.3 s of CPU) in a thread of its own
    and return it.

    Started with a run's first block (``infer.batch_report.ReportImage``), the figures drawn after the loop find
    them loaded: on a GPU the host is idle during the loop; on a CPU the import shares the cores with it
    (benchmarks/results/stack_cost.md).
    A module that fails to import here is left alone: drawing imports it again and raises there.
    """

    def load() -> None:
        for name in DRAWING_MODULES:
            try:
                importlib.import_module(name)
            except Exception:  # e.g. no matplotlib: the figure's own import says so, in the main thread
                return

    thread = threading.Thread(target=load, name="decode_mem-report-imports")
    thread.start()
    return thread


def png_bytes(fig: Figure, dpi: int = 100) -> bytes:
    """``fig`` as PNG, compressed at zlib's fastest level: 5 % larger than the default level 6, and the report's
    super-resolution figure in 0.15 s instead of 0.21 s on the 2-core AMD EPYC (docs/developers.md)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, pil_kwargs={"compress_level": 1})
    return buf.getvalue()


def _figure(width: float, height: float, rows: int = 1) -> tuple[Figure, np.ndarray]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]


def images_png(images: Images) -> bytes:
    """Widefield | super-resolution, side by side over the same field (``render.widefield``)."""
    from decode_mem.render.widefield import side_by_side_figure

    fig = side_by_side_figure(images.widefield, images.superres, pixel_size=images.pixel_size,
                              render_pixel=images.render_pixel, n_frames=images.n_frames, n_locs=images.n_locs,
                              zoom=images.zoom)
    return png_bytes(fig, dpi=110)


def drift_rmse(curve: DriftCurve) -> float | None:
    """RMSE (nm, x and y together) of the estimate against the truth on the frames both have, each curve's
    mean removed; None without a truth or common frames."""
    if curve.truth is None:
        return None
    frames, truth = curve.truth
    common, i, j = np.intersect1d(curve.frames, frames, return_indices=True)
    if common.size == 0:
        return None
    est = curve.dxdy[i] - curve.dxdy[i].mean(0)
    true = truth[j] - truth[j].mean(0)
    return float(np.sqrt(np.mean(np.sum((est - true) ** 2, axis=1))))


def drift_png(curve: DriftCurve) -> bytes:
    """dx and dy against the frame (1-based, as in the drift table); the truth dashed where known."""
    fig, (ax,) = _figure(8.0, 3.2)
    for axis, (name, colour) in enumerate((("dx", "tab:blue"), ("dy", "tab:orange"))):
        offset = 0.0
        if curve.truth is not None:
            frames, truth = curve.truth
            ax.plot(frames + 1, truth[:, axis], "--", color=colour, linewidth=1.0, label=f"{name} true")
            common, i, j = np.intersect1d(curve.frames, frames, return_indices=True)
            if common.size:  # the estimate's offset is arbitrary: align its mean with the truth's
                offset = float(truth[j, axis].mean() - curve.dxdy[i, axis].mean())
        ax.plot(curve.frames + 1, curve.dxdy[:, axis] + offset, "-", color=colour, linewidth=1.4,
                label=f"{name} {curve.label}")
    ax.set_xlabel("frame")
    ax.set_ylabel("drift [nm]")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    return png_bytes(fig)


DISPLAY_BINS = 150  # NeNA histograms are drawn with at most this many bins


def quality_png(quality: Quality) -> bytes:
    """FRC curves (the 1/7 threshold dotted, each resolution marked) beside the NeNA distance histograms with
    their fits."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11.0, 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    for i, (label, freq, curve, resolution) in enumerate(quality.frc):
        colour = f"C{i}"
        res = "n/a" if resolution is None else f"{resolution:.1f} nm"
        left.plot(freq[1:], curve[1:], color=colour, linewidth=1.2, label=f"{label}: {res}")
        if resolution is not None:
            left.axvline(1.0 / resolution, color=colour, linestyle=":", linewidth=1.0)
    left.axhline(1.0 / 7.0, color="k", linestyle="--", linewidth=0.8, label="1/7")
    left.set_xlabel("spatial frequency [1/nm]")
    left.set_ylabel("FRC")
    left.set_ylim(-0.2, 1.05)
    left.grid(alpha=0.3)
    left.legend(loc="upper right", fontsize="x-small")
    left.set_title("Fourier ring correlation of two halves", loc="left", fontsize="medium")
    for i, (label, centers, counts, fit, value) in enumerate(quality.nena):
        total = counts.sum()
        if total == 0:
            continue
        step = max(1, len(centers) // DISPLAY_BINS)  # drawn in at most DISPLAY_BINS bins
        cut = len(centers) - len(centers) % step
        centers = centers[:cut].reshape(-1, step).mean(axis=1)
        counts = counts[:cut].reshape(-1, step).sum(axis=1)
        fit = None if fit is None else fit[:cut].reshape(-1, step).sum(axis=1)
        width = float(centers[1] - centers[0]) if len(centers) > 1 else 1.0
        density = counts / (total * width)
        colour = f"C{i + 2}"
        val = "n/a" if value is None else f"{value:.2f} nm"
        right.step(centers, density, where="mid", color=colour, linewidth=0.8, alpha=0.7, label=f"{label}: {val}")
        if fit is not None:
            right.plot(centers, fit / (total * width), color=colour, linewidth=1.6)
    right.set_xlabel("distance between consecutive-frame localizations [nm]")
    right.set_ylabel("density [1/nm]")
    right.grid(alpha=0.3)
    right.legend(loc="upper right", fontsize="x-small")
    right.set_title("NeNA histograms and fits", loc="left", fontsize="medium")
    peak = max((float(c[np.argmax(n)]) for _, c, n, _, _ in quality.nena if n.sum()), default=None)
    if peak:
        right.set_xlim(0, 6 * peak)
    return png_bytes(fig)


def memory_png(history: Mapping[str, np.ndarray], title: str | None = None) -> bytes:
    """:func:`memory_figure` as PNG bytes."""
    return png_bytes(memory_figure(history, title))


def memory_figure(history: Mapping[str, np.ndarray], title: str | None = None) -> Figure:
    """Host memory (and GPU memory when there is any) against elapsed time, each phase of the run a shaded
    band named in a legend; ``title`` (default: what the plot shows, over which phases) above it."""
    t = np.asarray(history["elapsed_s"], np.float64)
    gpu = [(k, label) for k, label in GPU_SERIES if k in history and np.isfinite(history[k]).any()]
    panels = [("host memory [MB]", HOST_SERIES)] + ([("GPU memory [MB]", tuple(gpu))] if gpu else [])
    fig, axes = _figure(8.0, 2.8 * len(panels) + 0.3, rows=len(panels))
    for ax, (ylabel, series) in zip(axes, panels, strict=True):
        for key, label in series:
            y = np.asarray(history.get(key, np.full(t.shape, np.nan)), np.float64)
            n = int(np.isfinite(y).sum())
            if n:  # a short run's few readings as dots too: a line through one reading draws nothing
                ax.plot(t, y, linewidth=1.2, label=label, marker="o" if n <= FEW_READINGS else None, markersize=4)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(loc="upper left", fontsize="small", title="reading", title_fontsize="small")
    names = _shade_phases(axes, t, history.get("phase"))
    if title is None:
        what = "host and GPU memory" if gpu else "host memory"
        title = f"{what} of the process over the run" + (f" ({', '.join(names)})" if names else "")
        if len(t) == 1:
            title += ": one reading (a short run)"
    axes[0].set_title(title, loc="left", fontsize="medium")
    axes[-1].set_xlabel("elapsed time [s]")
    return fig


def _shade_phases(axes: np.ndarray, t: np.ndarray, phases: np.ndarray | None) -> list[str]:
    """One coloured band per run of a phase (a colour per phase name), the names in a legend at the upper right
    of the first panel, outside it; returns the names in order of appearance."""
    from matplotlib.patches import Patch

    if phases is None or len(phases) == 0:
        return []
    names = [str(p) if p is not None else "" for p in phases]
    order = list(dict.fromkeys(n for n in names if n))
    colours = {n: f"C{(i + 3) % 10}" for i, n in enumerate(order)}  # C0-C2 are the readings' lines
    start = 0
    for i in range(1, len(names) + 1):
        if i == len(names) or names[i] != names[start]:
            lo, hi = t[start], t[min(i, len(t) - 1)]
            if names[start] and hi > lo:
                for ax in axes:
                    ax.axvspan(lo, hi, color=colours[names[start]], alpha=0.15, linewidth=0)
            start = i
    if order:
        lines = axes[0].get_legend()
        axes[0].legend(handles=[Patch(color=colours[n], alpha=0.3, label=n) for n in order], loc="upper left",
                       bbox_to_anchor=(1.01, 1.0), fontsize="small", title="phase", title_fontsize="small")
        if lines is not None:
            axes[0].add_artist(lines)  # keep the readings' legend beside the phases'
    return order
