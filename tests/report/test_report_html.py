"""report.html: self-contained, sections only where there is data, text escaped, and it renders in Chromium."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread, imsave

from decode_mem.errors import DecodeMemError
from decode_mem.infer.runner import StackSummary
from decode_mem.memory import MemoryTracker
from decode_mem.report import DriftCurve, Images, ReportData, StackRow, find_chromium, screenshot, write_report
from decode_mem.report.figures import drift_rmse

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _history() -> dict[str, np.ndarray]:
    tracker = MemoryTracker(None, log_interval=1, device="cpu")
    for i, phase in enumerate(["simulate"] * 3 + ["infer"] * 5 + ["render"] * 2):
        tracker.update(step=i, phase=phase)
    return tracker.history


def _full(tmp_path: Path) -> ReportData:
    rng = np.random.default_rng(0)
    superres = np.zeros((320, 320), np.float32)
    superres[rng.integers(0, 320, 500), rng.integers(0, 320, 500)] = 1.0
    frames = np.arange(300)
    truth = np.column_stack([frames * 0.2, -frames * 0.1])
    estimate = truth + 7.0 + rng.normal(0, 1.0, truth.shape)  # an arbitrary offset and 1 nm noise
    (tmp_path / "locs.csv").write_text("x\n")
    return ReportData(
        title="test <run>", summary=[("device", "cpu")], metrics=[("Jaccard", "0.9000")],
        images=Images(100.0, widefield=rng.normal(100, 5, (32, 32)), superres=superres, render_pixel=10.0,
                      n_frames=300, n_locs=500, zoom=1.0),
        drift=DriftCurve(frames, estimate, truth=(frames, truth)), memory=_history(),
        stacks=[StackRow("a.tif", 300, 500, 10.0, 321.0, ("outside the model's photons",)),
                StackRow.failed("b.tif", "b.tif: not a TIFF")],
        warnings=["<script>alert(1)</script>"], files=[("localizations", tmp_path / "locs.csv")],
        command="python -m decode_mem.pipeline x.yaml", versions=[("numpy", "2.0")])


def test_full_report_is_self_contained_and_escaped(tmp_path: Path) -> None:
    path = write_report(tmp_path / "report.html", _full(tmp_path))
    html = path.read_text(encoding="utf-8")
    for heading in ("Summary", "Warnings", "Widefield and super-resolution", "Accuracy against the ground truth",
                    "Stage drift", "Memory", "Stacks", "Files", "Command and versions"):
        assert f"<h2>{heading}</h2>" in html, heading
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) == 3  # images, drift, memory
    assert all(base64.b64decode(b)[:8] == PNG_MAGIC for b in images)
    assert not re.search(r'(src|href)="(https?:|//)', html) and "<script" not in html  # nothing to fetch or run
    assert "&lt;script&gt;" in html and "test &lt;run&gt;" in html
    assert 'href="locs.csv"' in html  # outputs linked relative to the report
    assert "30.0" in html and "321 MB" in html and "failed" in html  # frames/s, peak memory, the failed stack
    assert re.search(r"RMSE of the estimated drift to the true drift: [01]\.\d\d nm", html)  # offset removed


def test_missing_sections_are_left_out(tmp_path: Path) -> None:
    html = write_report(tmp_path / "r.html", ReportData()).read_text()
    assert re.findall(r"<h2>([^<]+)</h2>", html) == ["Command and versions"]
    assert "numpy" in html and "python" in html  # versions collected when not given
    assert "data:image" not in html


def test_each_extra_figure_is_one_section(tmp_path: Path) -> None:
    png = tmp_path / "f.png"
    imsave(png, np.zeros((4, 4)))
    html = write_report(tmp_path / "r.html", ReportData(figures=[("PSF calibration from beads", png.read_bytes())])
                        ).read_text()
    assert html.count("<h2>PSF calibration from beads</h2>") == 1
    assert html.count("data:image/png;base64") == 1


def test_stack_rows_from_infer_summaries() -> None:
    done = StackSummary("a.tif", "a", 100, 2000, 4.0, 250.0, ("a.csv",), extra={"domain_warnings": ["too dim"]})
    row = StackRow.from_summary(done)
    assert (row.frames, row.localizations, row.frames_per_s, row.warnings) == (100, 2000, 25.0, ("too dim",))
    skipped = StackRow.from_summary(StackSummary("b.tif", "b", 0, 0, 0.0, None, ("b.json",), skipped=True))
    assert skipped.status == "skipped" and skipped.frames_per_s is None


def test_drift_rmse_ignores_offsets_and_needs_common_frames() -> None:
    frames = np.arange(10)
    truth = np.column_stack([frames, frames]).astype(float)
    assert drift_rmse(DriftCurve(frames, truth + 5.0, truth=(frames, truth))) == pytest.approx(0.0, abs=1e-12)
    wrong = truth.copy()
    wrong[:, 0] *= -1
    assert drift_rmse(DriftCurve(frames, wrong, truth=(frames, truth))) > 3.0
    assert drift_rmse(DriftCurve(frames, truth, truth=(frames + 100, truth))) is None
    assert drift_rmse(DriftCurve(frames, truth)) is None


def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    if find_chromium() is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    html = write_report(tmp_path / "report.html", _full(tmp_path))
    png = screenshot(html, tmp_path / "report.png", width=1280, height=2000)
    pixels = imread(png)
    assert pixels.shape[:2] == (2000, 1280)
    rgb = pixels[..., :3]
    assert rgb.std() > 0.05  # not a blank page
    # the embedded figures were drawn: the page has dark image pixels besides the light background and text
    dark = (rgb.mean(axis=2) < 0.1).mean()
    assert 0.02 < dark < 0.9


def test_screenshot_without_chromium_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "r.html").write_text("<html></html>")
    with pytest.raises(DecodeMemError, match="wrote no screenshot"):
        screenshot(tmp_path / "r.html", tmp_path / "r.png", chromium="/bin/false")


def test_memory_figure_is_titled_and_names_every_phase_band() -> None:
    """The title says what is drawn; every phase has its own coloured band named in a legend, narrow ones too
    (a band's name used to be written only over bands wider than 8 % of the run)."""
    from decode_mem.report.figures import memory_figure

    t = np.linspace(0.0, 10.0, 101)
    phases = np.array(["simulate"] * 3 + ["infer"] * 80 + ["drift"] * 10 + ["render"] * 8, dtype=object)
    fig = memory_figure({"elapsed_s": t, "phase": phases, "rss_anon_mb": 100 + t, "vm_rss_mb": 200 + t})
    ax = fig.axes[0]
    assert ax.get_title(loc="left") == "host memory of the process over the run (simulate, infer, drift, render)"
    legends = [a for a in ax.artists if hasattr(a, "get_texts")] + [ax.get_legend()]
    names = {t.get_text() for leg in legends for t in leg.get_texts()}
    assert {"simulate", "infer", "drift", "render", "RssAnon", "VmRSS"} <= names
    colours = {p.get_facecolor() for p in ax.patches}
    assert len(colours) == 4  # one colour per phase
