"""Every job that trains says, where no bar is drawn (a log, a pipe, the pipeline's lines), how far it is and how
long it has left (issue 46: the 3-D quick start printed nothing during 1741 s of training)."""

from __future__ import annotations

from dataclasses import replace

from decode_mem.train.observers import ProgressLines, duration, train_observed


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_line_at_the_first_step_then_every_30_s_with_the_time_left_from_the_pace() -> None:
    clock, lines = Clock(), []
    progress = ProgressLines(1000, lines.append, clock=clock)
    clock.t = 5.0  # start-up before the first step: not counted in the pace
    progress(1, {"loss": 2.0})
    for step in range(2, 1001):
        clock.t = 5.0 + (step - 1) * 0.5  # 0.5 s per step
        progress(step, {"loss": 1.0})
    assert lines[0] == "[train] step 1 of 1000 (0 %), 5 s so far, time left: from the next line on, loss 2"
    assert len(lines) == 18  # at 5 s, every 30 s after (35 ... 485 s), and at the last step (504.5 s, rounded to even)
    mid = next(line for line in lines if "step 241 of" in line)
    assert "2 min 5 s so far, about 6 min 20 s left" in mid  # 759 steps x 0.5 s
    assert lines[-1].startswith("[train] step 1000 of 1000 (100 %), 8 min 24 s so far, done")


def test_a_budget_run_counts_down_its_budget_and_a_resumed_run_paces_from_its_first_step() -> None:
    clock, lines = Clock(), []
    ProgressLines(None, lines.append, prefix="fine-tune", budget_s=600.0, clock=clock)(7, {"loss": 0.5})
    assert lines == ["[fine-tune] step 7, 0 s so far, 10 min 0 s left of the 10 min 0 s budget, loss 0.5"]
    lines.clear()
    progress = ProgressLines(100, lines.append, every=0.0, clock=clock)
    clock.t = 2.0
    progress(51, {})  # resumed at step 50
    clock.t = 4.0
    progress(52, {})  # 2 s per step since
    assert lines[1] == "[train] step 52 of 100 (52 %), 4 s so far, about 1 min 36 s left"
    assert duration(7322) == "2 h 2 min" and duration(-3) == "0 s"


def test_training_with_the_pipelines_echo_prints_progress_lines(tiny_cfg) -> None:
    lines: list[str] = []
    train_observed(replace(tiny_cfg, quiet=True), echo=lines.append)
    assert lines[0].startswith("[train] step 1 of 4 (25 %), ") and "time left" in lines[0]
    assert lines[-1].startswith("[train] step 4 of 4 (100 %), ") and ", done" in lines[-1]


def test_the_train_cli_prints_progress_lines_to_a_log(tiny_cfg, capsys) -> None:
    train_observed(replace(tiny_cfg, quiet=False))  # stderr is captured: not a terminal, so no bar
    err = capsys.readouterr().err
    assert "[train] step 1 of 4 (25 %)" in err and "[train] step 4 of 4 (100 %)" in err and "left" in err
    train_observed(replace(tiny_cfg, quiet=True, out=tiny_cfg.out + "_quiet"))
    assert "[train]" not in capsys.readouterr().err
