"""A library's warning during a job is one line for the user ("warning: ..."), as the jobs' own warnings are: not
Python's "file.py:83: UserWarning: ..." with a source line."""

from __future__ import annotations

import warnings

from decode_mem.cli import new_parser, run


def test_a_library_warning_is_one_plain_line(capsys):
    def body(_args):
        warnings.warn("the movie is crowded: the FRC reads finer than the localizations resolve", UserWarning,
                      stacklevel=1)

    before = warnings.showwarning
    assert run(new_parser("decode_mem.demo", "demo"), body, []) == 0
    err = capsys.readouterr().err
    assert err == "warning: the movie is crowded: the FRC reads finer than the localizations resolve\n", err
    assert warnings.showwarning is before  # restored after the job
