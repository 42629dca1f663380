"""One self-contained HTML page per run (``report.html``): whatever the caller has, nothing faked; names load lazily.

    from decode_mem.report import Images, ReportData, StackRow, write_report
    write_report(out / "report.html", ReportData(title="infer", stacks=[StackRow("a.tif", 1000, 52311, 41.2)],
                                                 memory=tracker.history, command=" ".join(sys.argv)))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.report.browser import find_chromium, screenshot
    from decode_mem.report.data import DriftCurve, Images, Quality, ReportData, StackRow, collect_versions
    from decode_mem.report.html import render_html, write_report

__all__ = ["DriftCurve", "Images", "Quality", "ReportData", "StackRow", "collect_versions", "find_chromium",
           "render_html", "screenshot", "write_report"]
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(["DriftCurve", "Images", "Quality", "ReportData", "StackRow", "collect_versions"], "data"),
    **dict.fromkeys(["render_html", "write_report"], "html"),
    **dict.fromkeys(["find_chromium", "screenshot"], "browser"),
})
