"""Words the console and report.html share (issue 46). A drift is said one way on the console and in the report
(the issue: 'span 110.1 nm (x)' on the console,
'-66.5 nm in x, first to last frame' in the report): its span per axis and its net change, both named."""

from __future__ import annotations

import numpy as np

from decode_mem.io.drift import describe_drift
from decode_mem.report.data import DriftCurve
from decode_mem.report.html import _drift_note


def test_span_and_net_change_are_both_named() -> None:
    dxdy = np.array([[0.0, 5.0], [40.0, 0.0], [-70.0, 2.0], [-66.5, 15.0]])  # x goes up, then down below 0
    words = describe_drift(dxdy)
    assert words == ("drift span 110.0 nm in x, 15.0 nm in y; first to last frame -66.5 nm in x, +10.0 nm in y")
    assert describe_drift(np.zeros((0, 2))) == "no drift measured (no frames)"


def test_the_report_says_it_in_the_same_words() -> None:
    dxdy = np.array([[0.0, 5.0], [40.0, 0.0], [-70.0, 2.0], [-66.5, 15.0]])
    note = _drift_note(DriftCurve(np.arange(4), dxdy, label="estimated (loo)"))
    assert describe_drift(dxdy) in note and "frames 1 to 4" in note


def test_the_stacks_table_names_each_stack_relative_to_the_report(tmp_path) -> None:
    """Issue 46: the Stacks table showed an absolute path; it is now relative to report.html's folder, as the
    Files section's links are."""
    from decode_mem.report import ReportData, StackRow, write_report

    stack = tmp_path / "movies" / "a.tif"
    page = write_report(tmp_path / "out" / "report.html",
                        ReportData(title="infer", stacks=[StackRow(str(stack), 10, 5, 1.0)])).read_text()
    assert "<td>../movies/a.tif</td>" in page and str(stack) not in page
