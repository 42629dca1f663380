"""``write_report(path, ReportData(...))``: one self-contained HTML page (inline CSS, PNGs as base64, no JS).

The page opens from anywhere — mailed, copied off a cluster — because nothing in it points outside the file
except the optional links to the run's outputs. Sections appear in a fixed order and only when their data
is there: summary, warnings, images, metrics, precision and resolution, drift, memory, stacks, files, command
and versions.
"""

from __future__ import annotations

import base64
import datetime
import math
import os
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path

import numpy as np

from decode_mem.io.atomic import atomic_output
from decode_mem.io.drift import describe_drift
from decode_mem.report.data import DriftCurve, ReportData, StackRow, collect_versions, format_mb
from decode_mem.report.figures import drift_png, drift_rmse, images_png, memory_png, quality_png

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1d1f; margin: 0;
       background: #f5f5f7; }
main { max-width: 1200px; margin: 0 auto; padding: 24px 32px 48px; }
h1 { font-size: 26px; margin: 8px 0 2px; }
h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #d2d2d7; padding-bottom: 4px; }
.sub { color: #6e6e73; margin: 0 0 12px; }
section { background: #fff; border-radius: 10px; padding: 4px 20px 16px; margin: 16px 0;
          box-shadow: 0 1px 3px rgba(0,0,0,.08); }
table { border-collapse: collapse; margin: 6px 0; }
th, td { text-align: left; padding: 4px 14px 4px 0; vertical-align: top; }
th { color: #6e6e73; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.rows tr { border-bottom: 1px solid #eee; }
img { max-width: 100%; height: auto; display: block; margin: 8px 0; }
.warn { background: #fff4e5; border-left: 4px solid #f5a623; padding: 8px 12px; margin: 6px 0; }
.bad { color: #b00020; }
code, pre { font: 13px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; }
pre { background: #f5f5f7; padding: 10px; border-radius: 6px; white-space: pre-wrap; word-break: break-all; }
"""


def write_report(path: str | os.PathLike, data: ReportData) -> Path:
    """Write ``data`` as one self-contained HTML file at ``path`` (atomically); returns the path."""
    path = Path(path)
    html = render_html(data, base=path.parent)
    with atomic_output(path) as tmp:
        tmp.write_text(html, encoding="utf-8")
    return path


def render_html(data: ReportData, base: Path | None = None) -> str:
    """The page as a string; ``base`` is the folder the file links are made relative to."""
    stamp = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    parts = [f"<h1>{escape(data.title)}</h1>", f'<p class="sub">written {escape(stamp)}</p>']
    if data.summary:
        parts.append(_section("Summary", _kv_table(data.summary)))
    if data.warnings:
        parts.append(_section("Warnings", "".join(f'<div class="warn">{escape(w)}</div>' for w in data.warnings)))
    if data.images is not None:
        parts.append(_section("Widefield and super-resolution", _img(images_png(data.images),
                                                                     "widefield and super-resolution images")))
    for title, png in data.figures:
        parts.append(_section(title, _img(png, title)))
    if data.metrics:
        parts.append(_section("Accuracy against the ground truth", _kv_table(data.metrics)))
    for q in data.quality:
        parts.append(_section(f"Precision and resolution without ground truth: {q.label}",
                              _kv_table(q.rows) + _img(q.png if q.png is not None else quality_png(q),
                                                        f"FRC and NeNA of {q.label}")))
    if data.drift is not None:
        parts.append(_section("Stage drift", _drift_note(data.drift) + _img(drift_png(data.drift), "drift curve")))
    if data.memory is not None and len(data.memory.get("elapsed_s", ())) > 0:
        parts.append(_section("Memory", _memory_peaks(data.memory) + _img(memory_png(data.memory), "memory history")))
    if data.stacks:
        parts.append(_section("Stacks", _stack_table(data.stacks, base)))
    if data.files:
        parts.append(_section("Files", _files(data.files, base)))
    tail = ""
    if data.command:
        tail += f"<pre>{escape(data.command)}</pre>"
    versions = data.versions if data.versions is not None else collect_versions()
    tail += _kv_table(versions)
    parts.append(_section("Command and versions", tail))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{escape(data.title)}"
            f"</title><style>{CSS}</style></head><body><main>\n" + "\n".join(parts) + "\n</main></body></html>\n")


def _section(title: str, body: str) -> str:
    return f"<section><h2>{escape(title)}</h2>{body}</section>"


def _kv_table(rows: Sequence[tuple[str, str]]) -> str:
    cells = "".join(f"<tr><th>{escape(str(k))}</th><td>{escape(str(v))}</td></tr>" for k, v in rows)
    return f'<table class="rows">{cells}</table>'


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def _drift_note(curve: DriftCurve) -> str:
    """What the curve is, how far it goes, and (with a truth) how far the estimate is from it."""
    if len(curve.frames) == 0:
        return f"<p>{escape(curve.label)}: no frames</p>"
    note = (f"<p>{escape(curve.label)}, frames {int(curve.frames[0]) + 1} to {int(curve.frames[-1]) + 1}: "
            f"{escape(describe_drift(curve.dxdy))}.")
    rmse = drift_rmse(curve)
    if rmse is not None:
        note += f" RMSE of the {escape(curve.label)} to the true drift: {rmse:.2f} nm (means removed)."
    return note + "</p>"


def _memory_peaks(history: Mapping[str, np.ndarray]) -> str:
    rows = []
    for key, label in (("rss_anon_mb", "peak RssAnon (the process's own memory)"), ("vm_rss_mb", "peak VmRSS"),
                       ("cuda_max_allocated_mb", "peak CUDA allocated"), ("nvml_used_mb", "peak NVML used")):
        values = np.asarray(history.get(key, ()), np.float64)
        if values.size and np.isfinite(values).any():
            rows.append((label, format_mb(float(np.nanmax(values)))))
    return _kv_table(rows) if rows else ""


def _relative(path: str, base: Path | None) -> str:
    """``path`` relative to ``base`` where it lies in ``base``, below it or in a folder beside it
    (``../movies/a.tif``); else as it is: a name, or a full path (``../../../data/a.tif`` says less than it)."""
    if base is None or not os.path.isabs(path):
        return path
    try:
        rel = os.path.relpath(path, base)
    except ValueError:  # another drive (Windows)
        return path
    return path if Path(rel).parts[:2] == (os.pardir, os.pardir) else rel


def _stack_table(stacks: Sequence[StackRow], base: Path | None = None) -> str:
    """The batch's stacks, each named by its path relative to the report's folder (as the Files section links)."""
    head = ("<tr><th>stack</th><th>status</th><th class=num>frames</th><th class=num>localizations</th>"
            "<th class=num>frames/s</th><th class=num>peak RssAnon</th><th>warnings</th></tr>")
    body = []
    for row in stacks:
        fps = row.frames_per_s
        status = escape(row.status) if row.status == "done" else f'<span class="bad">{escape(row.status)}</span>'
        body.append(
            f"<tr><td>{escape(_relative(row.stack, base))}</td><td>{status}</td><td class=num>{row.frames}</td>"
            f"<td class=num>{row.localizations}</td>"
            f"<td class=num>{'n/a' if fps is None or not math.isfinite(fps) else f'{fps:.1f}'}</td>"
            f"<td class=num>{format_mb(row.peak_rss_anon_mb)}</td>"
            f"<td>{'<br>'.join(escape(w) for w in row.warnings)}</td></tr>")
    return f'<table class="rows">{head}{"".join(body)}</table>'


def _files(files: Sequence[tuple[str, str | os.PathLike]], base: Path | None) -> str:
    items = []
    for label, target in files:
        p = Path(target)
        try:
            href = os.path.relpath(p, base) if base is not None else str(p)
        except ValueError:  # another drive (Windows)
            href = str(p)
        items.append(f"<tr><th>{escape(str(label))}</th><td><a href=\"{escape(Path(href).as_posix())}\">"
                     f"{escape(str(p))}</a></td></tr>")
    return f'<table class="rows">{"".join(items)}</table>'
