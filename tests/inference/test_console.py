"""The batch console on a terminal and in a log file: bars only on a terminal, and the summary line after
them starts at column 0 (a bar that closed with a cursor-up once left it at column 160 in tmux)."""

from __future__ import annotations

import io
import re
import sys

from decode_mem.infer.console import ConsoleObserver

ESCAPE = re.compile(r"\x1b\[(\d*)([A-Za-z])")


def _columns_of(output: str, text: str) -> list[int]:
    """The cursor column at which each occurrence of ``text`` starts, on a minimal VT100 (CR, LF, CSI codes)."""
    col, found, i = 0, [], 0
    while i < len(output):
        if output.startswith(text, i):
            found.append(col)
        m = ESCAPE.match(output, i)
        if m:
            if m.group(2) == "D":
                col = max(0, col - int(m.group(1) or 1))
            i = m.end()
            continue
        ch = output[i]
        col = 0 if ch in "\r\n" else col + 1
        i += 1
    return found


def _run(observer: ConsoleObserver, n_stacks: int) -> None:
    observer.run_started(n_stacks)
    for k in range(n_stacks):
        observer.stack_started(f"stack{k}", 20)
        for _ in range(4):
            observer.block_done(f"stack{k}", 5, None)
        observer.stack_finished(f"stack{k}")
    observer.run_finished()
    print("1 stack(s) done, the summary", flush=True)


class _Terminal(io.StringIO):
    """A stream that says it is a terminal (what ``isatty`` tells tqdm and ``progress_bars``)."""

    def isatty(self) -> bool:
        return True


def test_bars_on_a_terminal_leave_the_summary_at_column_0(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    for n_stacks in (1, 3):
        term = _Terminal()
        monkeypatch.setattr(sys, "stderr", term)
        monkeypatch.setattr(sys, "stdout", term)
        _run(ConsoleObserver(), n_stacks)
        monkeypatch.undo()
        out = term.getvalue()
        assert "stack0" in out  # a bar was drawn on the terminal
        assert _columns_of(out, "1 stack(s) done") == [0], repr(out[-400:])


def test_a_log_file_gets_no_bars_and_no_cursor_codes(capsys) -> None:
    _run(ConsoleObserver(), 3)
    captured = capsys.readouterr()
    assert "\x1b[" not in captured.err + captured.out and "\r" not in captured.err + captured.out
    assert "stack0" not in captured.err and "1 stack(s) done" in captured.out


def test_a_wait_for_frames_is_said_on_the_bar_or_once_in_a_log(monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    obs = ConsoleObserver()
    obs.run_started(1)
    obs.stack_started("live", 100)
    obs.waiting("live", 27.4)
    assert "live: waiting for frames, ends in 27 s" in term.getvalue()  # the bar's description, not a frozen bar
    obs.waiting("live", None)
    obs.block_done("live", 5, None)
    assert term.getvalue().rstrip().split("\r")[-1].startswith("live:")  # frames again: the bar's own name back
    obs.stack_finished("live")
    monkeypatch.undo()
    log = ConsoleObserver()  # no terminal: no bar; one line per wait, however often it is told
    log.stack_started("live", 100)
    for left in (29.0, 28.0, 27.0):
        log.waiting("live", left)
    log.waiting("live", None)
    log.waiting("live", 12.0)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["live: waiting for frames, ends in 29 s without a new byte",
                     "live: waiting for frames, ends in 12 s without a new byte"]
