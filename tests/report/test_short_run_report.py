"""A short run's report: its memory chart shows its readings (one reading drew an empty frame with a legend), and
the Stacks table names a movie far from the report by its path, not by ``../../../..``."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def test_a_memory_history_of_one_reading_draws_it() -> None:
    from decode_mem.report.figures import memory_figure, png_bytes

    history = {"elapsed_s": np.array([7.9]), "phase": np.array(["stack"], dtype=object),
               "rss_anon_mb": np.array([334.0]), "vm_rss_mb": np.array([420.0])}
    fig = memory_figure(history)
    ax = fig.axes[0]
    assert [line.get_marker() for line in ax.lines] == ["o", "o"]
    assert "one reading" in ax.get_title(loc="left")
    # and the dot is drawn where the reading is: pixels of its colour (matplotlib's C0) around that point
    import io

    from PIL import Image

    png = np.asarray(Image.open(io.BytesIO(png_bytes(fig, dpi=fig.dpi))).convert("RGB")).astype(int)
    x, y = ax.transData.transform((7.9, 334.0))
    row, col = round(png.shape[0] - y), round(x)
    near = png[row - 3:row + 4, col - 3:col + 4]
    assert (np.abs(near - np.array([0x1F, 0x77, 0xB4])).sum(axis=2) < 30).sum() >= 9


def test_the_stacks_table_gives_the_path_of_a_movie_far_from_the_report(tmp_path: Path) -> None:
    from decode_mem.report import ReportData, StackRow, write_report

    far = tmp_path / "data" / "2026" / "movie.tif"
    near = tmp_path / "runs" / "movies" / "a.tif"
    page = write_report(tmp_path / "runs" / "out" / "report.html",
                        ReportData(title="infer", stacks=[StackRow(str(far), 10, 5, 1.0),
                                                          StackRow(str(near), 10, 5, 1.0)])).read_text()
    assert f"<td>{far}</td>" in page and "../../" not in page
    assert "<td>../movies/a.tif</td>" in page  # a folder beside the report's: relative, as the Files section links
