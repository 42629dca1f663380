"""The training log survives a kill at any moment: a resumed run keeps every row up to its checkpoint."""

from __future__ import annotations

import csv
import subprocess
import sys
import textwrap

from decode_mem.train.log import LOG_COLUMNS, TrainLog


def _write_log(path, steps):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, LOG_COLUMNS)
        w.writeheader()
        w.writerows({"step": s, "time_s": 0.5 * s, "lr": 0.0006, "loss": 1.25, "count": 2.5, "loc": -3.0,
                     "bg": 0.75, "grad_norm": 1000.0} for s in steps)


def _steps(path):
    with open(path, newline="") as fh:
        return [int(r["step"]) for r in csv.DictReader(fh)]


def test_a_resume_killed_before_its_first_row_keeps_every_earlier_row(tmp_path):
    log = tmp_path / "train_log.csv"
    _write_log(log, range(50, 20001, 50))  # 400 rows, ~30 KB: more than one write buffer
    code = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from decode_mem.train.log import TrainLog
        kept_open = TrainLog(Path({str(log)!r}), start_step=15000)  # noqa: F841 - open, as in a run
        os._exit(9)  # killed before the run logs a row (no close, no flush)
    """)
    subprocess.run([sys.executable, "-c", code], check=False)
    assert _steps(log) == list(range(50, 15001, 50))


def test_resume_drops_rows_past_the_checkpoint_and_appends(tmp_path):
    log = tmp_path / "train_log.csv"
    _write_log(log, [50, 100, 150, 200])
    t = TrainLog(log, start_step=100)
    t.write({"step": 150, "time_s": 1.0})
    t.close()
    assert _steps(log) == [50, 100, 150]
    t = TrainLog(log, start_step=150)  # nothing past the checkpoint: appended to as it is
    t.write({"step": 200, "time_s": 2.0})
    t.close()
    assert _steps(log) == [50, 100, 150, 200]


def test_a_fresh_run_starts_an_empty_log(tmp_path):
    log = tmp_path / "train_log.csv"
    _write_log(log, [50, 100])
    TrainLog(log, start_step=0).close()
    assert _steps(log) == []
    assert log.read_text().splitlines() == [",".join(LOG_COLUMNS)]


def test_the_model_cards_wall_time_counts_only_the_steps_the_log_covers(tmp_path):
    from decode_mem.export.card import _train_time

    log = tmp_path / "train_log.csv"
    with open(log, "w", newline="") as fh:
        w = csv.DictWriter(fh, LOG_COLUMNS)
        w.writeheader()
        # piece 1: steps 50-200 in 40 s; piece 2 resumes at 200: 250-300 in 20 s; then a gap (rows lost) and a
        # piece whose rows start at 1050 (10 s after its start) and end at 1100 (20 s)
        for step, t in ((50, 10), (100, 20), (150, 30), (200, 40), (250, 10), (300, 20), (1050, 10), (1100, 20)):
            w.writerow({"step": step, "time_s": t})
    seconds, steps = _train_time(tmp_path)
    assert steps == 300 + 50  # 50-300, and 1050-1100 (the 750 steps before 1050 are not in the log)
    assert seconds == 40 + 20 + 10  # the gap's first row's 10 s belong to steps the log does not have


def test_a_last_row_cut_short_is_dropped_not_appended_to(tmp_path):
    log = tmp_path / "train_log.csv"
    _write_log(log, [50, 100])
    log.write_bytes(log.read_bytes() + b"150,75.0,0.0006,1.2")  # a row cut short, no newline
    t = TrainLog(log, start_step=150)
    t.write({"step": 200, "time_s": 2.0})
    t.close()
    assert _steps(log) == [50, 100, 200]
