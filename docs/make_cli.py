"""Write ``docs/cli.md``: every job's ``--help``, as the command prints it (``python docs/make_cli.py``)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

JOBS = ("infer", "calibrate", "fit", "drift", "link", "evaluate", "render", "psf", "simulate", "train", "export",
        "plan", "pipeline", "register")


def cli_page() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; one width for the page
    lines = ["# Every flag of every job", "", "[← README](../README.md)", "",
             "Each section is `python -m decode_mem.<job> --help` as it prints (written by `python docs/make_cli.py`).",
             "All jobs accept dashes or underscores in flags (`--chunk-size` = `--chunk_size`).", ""]
    lines += [f"- [{job}](#{job})" for job in JOBS] + [""]
    for job in JOBS:
        text = importlib.import_module(f"decode_mem.{job}.__main__").build_parser().format_help()
        lines += [f"## {job}", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    (Path(__file__).resolve().parent / "cli.md").write_text(cli_page())
