"""What every command-line tool shares: one parser shape, one flag spelling, one exit-code convention.

Every ``python -m decode_mem.<job>`` builds its parser with ``new_parser`` (``--debug`` and ``--quiet`` on
every tool), adds flags with ``add`` (``--chunk_size`` is also accepted as ``--chunk-size``) and runs its
body through ``run``: exit 0 done, 1 some inputs failed (the body returns 1), 2 bad settings or input
(a ``DecodeMemError``, printed as one ``error: ...`` line; ``--debug`` shows the traceback instead).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from decode_mem.errors import DecodeMemError

EXIT_OK, EXIT_SOME_FAILED, EXIT_BAD_SETTINGS = 0, 1, 2
DEVICE_HELP = "auto | cpu | cuda | cuda:N (default auto: CUDA when present, else the CPU)"


def int_or_auto(value: str) -> int | str:
    """argparse type for sizes that may be chosen automatically: an integer or the word 'auto'."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'auto', got {value!r}") from None


def progress_bars(quiet: bool | None = False) -> bool:
    """Whether to draw progress bars: not ``quiet`` and stderr a terminal. A bar redraws itself with
    carriage returns and cursor-up codes, which a log file (``2> log``, a pipe) would keep as garbage."""
    if quiet:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def new_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """A parser with ``--debug`` and ``--quiet``; the description keeps its line breaks and loses the
    reStructuredText double backticks of a module docstring (``--help`` is plain text)."""
    p = argparse.ArgumentParser(prog=f"python -m {prog}",
                                description=description.replace("``", "") if description else description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quiet", action="store_true", default=None,
                   help="no progress bars or summary lines (bars are drawn only when stderr is a terminal)")
    p.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    return p


def add(group: argparse.ArgumentParser | argparse._ArgumentGroup, *flags: str, **kwargs: Any) -> argparse.Action:
    """``group.add_argument`` with a dashed alias for every underscored long flag (``--a_b`` and ``--a-b``)."""
    names = list(flags)
    for flag in flags:
        if flag.startswith("--") and "_" in flag[2:] and flag.replace("_", "-") not in names:
            names.append(flag.replace("_", "-"))
    return group.add_argument(*names, **kwargs)


def run(parser: argparse.ArgumentParser, body: Callable[[argparse.Namespace], int | None],
        argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run ``body(args)``; map the outcome to the exit-code convention (module docstring)."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, message already printed by argparse)
        return int(e.code or 0)
    # idle OpenMP threads sleep instead of spinning: on a shared machine a spinning pool slowed torch 2-3x
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when torch's OpenMP starts, i.e. after parsing
    try:
        code = body(args)
    except DecodeMemError as e:
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return EXIT_OK if code is None else int(code)
