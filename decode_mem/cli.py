"""What every command-line tool shares: one parser shape, one flag spelling, one exit-code convention.

Every ``python -m decode_mem.<job>`` builds its parser with ``new_parser`` (``--debug`` and ``--quiet`` on
every tool), adds flags with ``add`` (``--chunk_size`` is also accepted as ``--chunk-size``; a renamed flag keeps
its old spelling as a hidden alias) and runs its
body through ``run``: exit 0 done, 1 some inputs failed (the body returns 1), 2 bad settings or input
(a ``DecodeMemError``, printed as one ``error: ...`` line; ``--debug`` shows the traceback instead), 130 / 143
after Ctrl-C / SIGTERM (the job stops cleanly where it can, keeps what reached disk and says how to continue; a
signal that Python dropped inside a weakref callback or ``__del__`` is sent again).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import textwrap
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from decode_mem.config import check_output_file, check_output_folder
from decode_mem.errors import ConfigError, DecodeMemError, Interrupted, Stopped
from decode_mem.threads import fix_malloc_thresholds, limit_malloc_arenas

EXIT_OK, EXIT_SOME_FAILED, EXIT_BAD_SETTINGS = 0, 1, 2
DEVICE_HELP = "auto | cpu | cuda | cuda:N (default auto: CUDA when present, else the CPU)"
# One meaning per flag name in every job: a job's help for these flags starts with these words (its own details
# follow); tests/test_cli_conventions.py checks it.
MEANINGS = {
    "--chunk_size": "tile core side in px (inference; each tile adds the network's halo)",
    "--crop_size": "training crop side in px (large training frames are cut into crops, no halo)",
    "--batch_size": "windows (3-frame network inputs) per network call",
    "--accumulation_steps": "micro-batches per optimizer step",
    "--memory_limit": "memory budget in bytes, e.g. 2GiB (host RssAnon on a CPU, device memory on CUDA)",
    "--budget_minutes": "time limit in minutes (wall clock)",
}
# The camera in every job's help: no internal names; units for every number (docs/cameras.md has the YAML keys).
CAMERA_HELP = "emccd | scmos (presets) or a camera YAML (docs/cameras.md)"
TABLES_READ = ("ThunderSTORM .csv, Picasso .hdf5, .parquet, SMAP _sml.mat, ShareLoc .smlm, DECODE .h5, rapidSTORM "
               ".txt; docs/formats.md")  # what every job that reads localizations reads (io.localizations)
TABLES_WRITTEN = "csv, picasso, parquet, smap, smlm, decode"  # infer.config.FORMATS, io.localizations.WRITTEN
MOVIES_READ = "TIFF, OME-TIFF, zarr, a folder of TIFFs, .npy, ND2, CZI, LIF, SIF or NDTiff (docs/formats.md)"
CAMERA_FLAG_HELP = {
    "baseline": "camera offset in ADU",
    "e_per_adu": "camera conversion in electrons per ADU",
    "em_gain": "EM gain, a factor (1: no EM register)",
    "qe": "quantum efficiency, a fraction 0-1",
    "read_noise": "read noise in e- rms",
    "pixel_size": "camera pixel in nm",
}
# The exit codes every tool's help states (run maps outcomes to them); a tool adds its own exit 1 where it has one.
EXIT_STOPPED = "130 / 143 stopped by Ctrl-C / SIGTERM (what reached disk is kept)"


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


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one ``error:`` line (exit 2), like every other bad setting."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_SETTINGS, f"error: {message} (see {self.prog} --help)\n")


def new_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """A parser with ``--debug`` and ``--quiet``; the description keeps its line breaks and loses the
    reStructuredText double backticks of a module docstring (``--help`` is plain text)."""
    p = _Parser(prog=f"python -m {prog}", description=_wrapped(description.replace("``", "")) if description else None,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quiet", action="store_true", default=None,
                   help="no progress bars or summary lines (bars are drawn only when stderr is a terminal)")
    p.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    return p


def _wrapped(text: str, width: int = 116) -> str:
    """Lines longer than 120 characters folded at ``width``; shorter ones keep their breaks (a docstring's)."""
    return "\n".join(textwrap.fill(line, width) if len(line) > 120 else line for line in text.splitlines())


def add(group: argparse.ArgumentParser | argparse._ArgumentGroup, *flags: str, old: Sequence[str] = (),
        **kwargs: Any) -> argparse.Action:
    """``group.add_argument`` with a dashed alias for every underscored long flag (``--a_b`` and ``--a-b``).

    ``old``: former spellings of a renamed flag, still accepted (scripts keep working) but not shown by
    ``--help``: a second action with the same destination, no default of its own and suppressed help.
    """
    action = group.add_argument(*_dashed(flags), **kwargs)
    if old:
        same = {k: v for k, v in kwargs.items() if k not in ("help", "default", "dest", "required")}
        group.add_argument(*_dashed(old), dest=action.dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                           **same)
    return action


def _dashed(flags: Sequence[str]) -> list[str]:
    names = list(flags)
    for flag in flags:
        if flag.startswith("--") and "_" in flag[2:] and flag.replace("_", "-") not in names:
            names.append(flag.replace("_", "-"))
    return names


def run(parser: argparse.ArgumentParser, body: Callable[[argparse.Namespace], int | None],
        argv: Sequence[str] | None = None, outputs: Mapping[str, str] | None = None) -> int:
    """Parse ``argv`` and run ``body(args)``; map the outcome to the exit-code convention (module docstring).

    ``outputs``: the flags' destinations that name outputs, ``'folder'``, ``'file'`` or ``'path'`` (a file or a
    folder such as a zarr store: only the folder it goes into is checked): each given one is checked (writable,
    a folder or a file as named) before ``body`` starts, so that a read-only folder or ``--out`` naming a file is
    one error line, exit 2, with nothing written.
    """
    try:
        args = parser.parse_args(_attach_negative_values(parser, sys.argv[1:] if argv is None else list(argv)))
    except SystemExit as e:  # --help (0) or a usage error (2, message already printed)
        return int(e.code or 0)
    previous = _interrupt_on_signals()
    redelivery = _Redelivery.install() if previous else None
    shown = warnings.showwarning
    warnings.showwarning = _warning_line  # a library's warning is one line for the user, not Python's source line
    limit_malloc_arenas()  # before the job's threads start (threads.limit_malloc_arenas)
    fix_malloc_thresholds()  # every run's large blocks from the heap, resumed or not (threads.fix_malloc_thresholds)
    try:
        for dest, kind in (outputs or {}).items():
            if getattr(args, dest, None) is not None:
                _check_output(kind, str(getattr(args, dest)))
        _check_camera_flags(args)
        code = body(args)
    except DecodeMemError as e:
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    except Stopped as e:  # what reached disk is kept; the message says where and how to continue
        print(f"stopped: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:
        print("interrupted", file=sys.stderr)
        return 128 + getattr(e, "signum", signal.SIGINT)
    finally:
        warnings.showwarning = shown
        if redelivery is not None:
            redelivery.remove()
        _restore_signals(previous)
    return EXIT_OK if code is None else int(code)


def _warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """``warnings.showwarning`` while a job runs: ``warning: <message>`` on stderr, as the jobs' own warnings."""
    print(f"warning: {message}", file=file or sys.stderr)


def _interrupt_on_signals() -> dict[int, object]:
    """SIGTERM (a scheduler's time limit, ``kill``) and SIGINT (Ctrl-C) raise ``Interrupted`` where the program is,
    as Ctrl-C does by default: the jobs then stop cleanly, keep what reached disk and exit 128 + the signal.
    Returns the handlers it replaced (none outside the main thread, where signals cannot be handled)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.signal(signum, _raise_interrupted)
    return previous


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signum)


class _Redelivery:
    """Sends a signal again whose ``Interrupted`` Python dropped: a handler that runs while a weakref callback or a
    ``__del__`` runs raises there, and Python prints "Exception ignored" and goes on, so a SIGTERM was lost (the
    pipeline's stop test, now and then). ``sys.unraisablehook`` sees the dropped exception; the signal is sent again
    ``REDELIVER_S`` later, from a timer thread, when the callback is over."""

    REDELIVER_S = 0.02

    def __init__(self) -> None:
        self._previous = sys.unraisablehook
        self._timers: list[threading.Timer] = []

    @classmethod
    def install(cls) -> _Redelivery:
        redelivery = cls()
        sys.unraisablehook = redelivery._hook
        return redelivery

    def _hook(self, unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):
            self._previous(unraisable)
            return
        timer = threading.Timer(self.REDELIVER_S, os.kill, (os.getpid(), unraisable.exc_value.signum))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def remove(self) -> None:
        """The previous hook back; signals not yet sent again are not sent (the command is over)."""
        sys.unraisablehook = self._previous
        for timer in self._timers:
            timer.cancel()


def _restore_signals(previous: dict[int, object]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def _check_camera_flags(args: argparse.Namespace) -> None:
    """The camera flags a job takes, checked as the user typed them (the flag named, a unit slip said), before any
    work: the same rules as a camera YAML's keys (``config.camera_field_problem``)."""
    from decode_mem.config import camera_field_problem

    for name in CAMERA_FLAG_HELP:
        value = getattr(args, name, None)
        problem = None if value is None else camera_field_problem(name, value)
        if problem:
            raise ConfigError(f"--{name} {problem}")


def _check_output(kind: str, value: str) -> None:
    if kind == "folder":
        check_output_folder(value)
    elif kind == "file":
        check_output_file(value)
    else:
        check_output_folder(os.path.dirname(value) or ".")


def _attach_negative_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``--flag -2GiB`` -> ``--flag=-2GiB`` for flags that take a value: argparse would read ``-2GiB`` as an
    unknown option and print the usage; attached, the value reaches the flag's own check (one clear line)."""
    takes_value = {s for a in parser._actions if a.nargs is None and a.option_strings and not
                   isinstance(a, (argparse._StoreConstAction, argparse._StoreTrueAction, argparse._StoreFalseAction))
                   for s in a.option_strings if s.startswith("--")}
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in takes_value and i + 1 < len(argv) and re.match(r"-[0-9.]", argv[i + 1]):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out
