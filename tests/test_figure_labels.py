"""Pictures that read at a glance (issue 46): no title or label cut at the figure's edge, the super-resolution
panel's title and colour bar name the same pixel, and the rendered PNG's legend labels are white and large."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure


def _texts_inside(fig: Figure) -> list[str]:
    """The visible texts of ``fig`` that reach past its edges (drawn once, in display pixels)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    cut = []
    texts = list(fig.texts)
    for ax in fig.axes:  # titles, axis labels and legends (tick labels outside the view are kept but not drawn)
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
        if ax.get_legend() is not None:
            texts += list(ax.get_legend().get_texts())
    for text in texts:
        if not text.get_visible() or not text.get_text().strip():
            continue
        extent = text.get_window_extent(renderer)
        if extent.x0 < box.x0 - 1 or extent.x1 > box.x1 + 1 or extent.y0 < box.y0 - 1 or extent.y1 > box.y1 + 1:
            cut.append(text.get_text())
    return cut


def test_memory_plot_title_with_many_phases_is_not_cut(tmp_path: Path, monkeypatch) -> None:
    from decode_mem.memory import MemoryTracker

    tracker = MemoryTracker()
    for i, phase in enumerate(("simulate", "infer", "drift", "evaluate", "render", "report", "end")):
        tracker.record({"rss_anon_mb": 100.0 + i, "vm_rss_mb": 200.0 + i}, phase=phase)
    drawn: list[Figure] = []
    original = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (drawn.append(self), original(self, *a, **k))[1])
    tracker.plot_history(tmp_path / "memory.png")
    (fig,) = drawn
    assert _texts_inside(fig) == []
    assert "readings kept" in fig.axes[0].get_title(loc="left")


def test_binned_superresolution_title_and_colour_bar_name_the_same_pixel() -> None:
    from decode_mem.render.widefield import side_by_side_figure

    superres = np.zeros((3000, 3000), np.float32)  # 10 nm render of a 30 µm field: shown binned
    superres[1000:1010, 1000:1010] = 1.0
    fig = side_by_side_figure(np.ones((300, 300)), superres, pixel_size=100.0, render_pixel=10.0)
    titles = [ax.get_title(loc="left") for ax in fig.axes if ax.get_title(loc="left")]
    bars = [ax.get_xlabel() for ax in fig.axes if "per" in ax.get_xlabel()]
    (title,) = [t for t in titles if t.startswith("super-resolution")]
    (bar,) = bars
    shown = bar.split("per ")[1].split(" nm")[0]  # e.g. '30'
    assert f"({shown} nm pixels, sums of 10 nm)" in title, (title, bar)
    assert _texts_inside(fig) == []


def test_rendered_png_legend_labels_are_white_and_readable() -> None:
    from decode_mem.render.image import _legend_rgba

    tile = _legend_rgba(100, "1 µm", 0.719, "magma", "locs per\n10 nm px").astype(np.float32) / 255
    assert tile.shape[0] >= 80  # room for 10 pt labels
    ticks = tile[-28:, :60, :3]  # the colour bar's tick labels ('0', ...) under it
    assert (ticks.min(axis=2) > 0.9).sum() > 15  # white text, not grey under the legend's shade


def test_widefield_png_has_a_scale_bar_when_its_pixel_is_known(tmp_path: Path) -> None:
    from matplotlib.image import imread

    from decode_mem.render.widefield import save_widefield

    frame = np.random.default_rng(0).normal(500.0, 20.0, (96, 96))  # no pixel near white by itself
    save_widefield(frame, tmp_path / "plain.png")
    save_widefield(frame, tmp_path / "legend.png", pixel_size=100.0)
    plain, legend = imread(tmp_path / "plain.png"), imread(tmp_path / "legend.png")
    assert plain.shape[:2] == (96, 96)  # one pixel per camera pixel, as before
    assert legend.shape[:2] == (480, 480)  # 5 screen pixels per camera pixel
    corner = legend[-90:, :240, :3]
    assert (corner.min(axis=2) > 0.97).sum() > 300  # the white 2 µm bar (200 px x 6) and the white labels
    enlarged = np.repeat(np.repeat(plain, 5, axis=0), 5, axis=1)
    assert np.array_equal(legend[:300], enlarged[:300])  # above the legend: the same image, only enlarged


def test_render_z_png_has_a_scale_bar_and_labels_inside(tmp_path: Path, monkeypatch) -> None:
    from mpl_toolkits.axes_grid1.anchored_artists import AnchoredSizeBar

    from decode_mem.render.depth import save_depth_png

    drawn: list[Figure] = []
    original = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (drawn.append(self), original(self, *a, **k))[1])
    rgb = np.zeros((640, 640, 3), np.float32)  # 6.4 µm at 10 nm
    save_depth_png(rgb, (-400.0, 400.0), tmp_path / "render_z.png", render_pixel=10.0)
    (fig,) = drawn
    ax = fig.axes[0]
    (bar,) = [a for a in ax.artists if isinstance(a, AnchoredSizeBar)]
    assert bar.txt_label.get_text() == "1 µm"  # a round length near a fifth of the 6.4 µm field
    assert bar.size_bar.get_children()[0].get_width() == 1.0  # drawn 1 µm long in the axes' µm
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    assert _texts_inside(fig) == []
    assert fig.axes[1].get_ylabel() == "z [nm]"


def test_live_lag_plot_has_a_legend_naming_both_lines_and_their_axes(monkeypatch) -> None:
    import decode_mem.report.figures as figures
    from decode_mem.infer.live_status import LiveStatus, timeline_png

    drawn: list[Figure] = []
    original = figures.png_bytes
    monkeypatch.setattr(figures, "png_bytes", lambda fig, *a, **k: (drawn.append(fig), original(fig, *a, **k))[1])
    status = LiveStatus((64, 64), pixel_size=100.0, block=10)
    for seen in (20, 30, 40):
        status.sample(seen=seen, lag_s=0.5)
    assert timeline_png(status).startswith(b"\x89PNG")
    (fig,) = drawn
    bottom = fig.axes[1]
    legend = bottom.get_legend()
    assert legend is not None
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == ["frames behind the camera (left axis)", "seconds behind the camera (right axis)"]
    assert _texts_inside(fig) == []
