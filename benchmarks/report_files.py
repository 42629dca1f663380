"""A benchmark's report files, written one way: the markdown with its figure's image line, the PNG, and (with a
record) the JSON of what was measured, each whole or not at all (``atomic_output``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_report_files(out: Path, lines: list[str], draw: Callable[[Path], None],
                       record: dict[str, Any] | None = None) -> Path:
    """``out`` (``lines`` and the figure's image line), ``out`` as .png drawn by ``draw(path)``, and with
    ``record`` ``out`` as .json; returns the PNG's path."""
    from decode_mem.io.atomic import atomic_output

    png = out.with_suffix(".png")
    draw(png)
    with atomic_output(out) as tmp:
        tmp.write_text("\n".join([*lines, "", f"![{out.stem}]({png.name})", ""]))
    if record is not None:
        with atomic_output(out.with_suffix(".json")) as tmp:
            tmp.write_text(json.dumps(record, indent=1, default=float))
    return png


def add_render_option(parser: argparse.ArgumentParser, report: str) -> None:
    """``--render JSON``: a script writes its report again from a record it measured (``report``.json), measuring
    nothing (a layout or wording change reaches the committed report without a rerun)."""
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help=f"write the report of a measured record (a {report}.json) again, measuring nothing")
