"""Write ``docs/cli.md``: every job's ``--help``, as the command prints it, one block per flag group so that a
reader finds a flag by its group (``python docs/make_cli.py``)."""

from __future__ import annotations

import argparse
import importlib
import os
from pathlib import Path

JOBS = ("infer", "calibrate", "fit", "drift", "link", "evaluate", "render", "psf", "simulate", "train", "export",
        "plan", "pipeline", "register")


def job_help(parser: argparse.ArgumentParser) -> list[str]:
    """The parser's help as argparse prints it, split into markdown: usage and description, then one ``###``
    heading and text block per argument group (the flags of one group together, as ``--help`` groups them)."""
    formatter = parser._get_formatter()
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    formatter.add_text(parser.description)
    lines = ["```text", formatter.format_help().rstrip(), "```", ""]
    for group in parser._action_groups:
        if not any(a.help != argparse.SUPPRESS for a in group._group_actions):
            continue
        formatter = parser._get_formatter()
        formatter.add_text(group.description)
        formatter.add_arguments(group._group_actions)
        lines += [f"### {parser.prog.split('.')[-1]}: {group.title}", "", "```text",
                  formatter.format_help().strip("\n"), "```", ""]
    if parser.epilog:
        lines += ["```text", parser.epilog.strip("\n"), "```", ""]
    return lines


def cli_page() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; one width for the page
    lines = ["# Every flag of every job", "", "[← README](../README.md)", "",
             "Each section is `python -m decode_mem.<job> --help` as it prints, its flags in the groups `--help` shows "
             "(written by `python docs/make_cli.py`). What each job is for: the README's table of jobs. All jobs "
             "accept dashes or underscores in flags (`--chunk-size` = `--chunk_size`).", ""]
    lines += [" · ".join(f"[{job}](#{job})" for job in JOBS), ""]
    for job in JOBS:
        parser = importlib.import_module(f"decode_mem.{job}.__main__").build_parser()
        lines += [f"## {job}", "", *job_help(parser)]
    return "\n".join(lines)


if __name__ == "__main__":
    (Path(__file__).resolve().parent / "cli.md").write_text(cli_page())
