"""Every job's CLI has one shape: ``--help`` works and is fast (no torch), ``--debug``/``--quiet`` exist,
dashed and underscored spellings are both accepted, and bad settings exit with 2 and one ``error:`` line."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

JOBS = ("simulate", "train", "infer", "evaluate", "render", "pipeline", "export", "plan", "calibrate", "fit",
        "drift", "psf")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("job", JOBS)
def test_help_is_fast_and_lists_debug_and_quiet(job: str) -> None:
    code = (f"import sys; from decode_mem.{job}.__main__ import main; rc = main(['--help']); "
            "assert 'torch' not in sys.modules, 'torch imported by --help'; sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "--debug" in done.stdout and "--quiet" in done.stdout


@pytest.mark.parametrize("job", JOBS)
def test_underscored_flags_have_dashed_aliases(job: str) -> None:
    parser = importlib.import_module(f"decode_mem.{job}.__main__").build_parser()
    flags = {s for a in parser._actions for s in a.option_strings}
    for flag in flags:
        if flag.startswith("--") and "_" in flag:
            assert flag.replace("_", "-") in flags, f"{job}: {flag} has no dashed alias"


def test_bad_settings_exit_2_with_one_error_line(tmp_path: Path, capsys) -> None:
    from decode_mem.render.__main__ import main

    assert main([str(tmp_path / "missing.csv"), "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "missing.csv" in err[0]


@pytest.mark.parametrize("job", JOBS)
def test_every_flag_has_help_without_rest_markup(job: str) -> None:
    """Every flag and positional says what it is; ``--help`` is plain text (no reStructuredText ``` `` ```);
    a flag with a default shows it; ``--device`` reads the same in every job."""
    parser = importlib.import_module(f"decode_mem.{job}.__main__").build_parser()
    for action in parser._actions:
        name = action.option_strings[0] if action.option_strings else action.dest
        assert action.help and action.help.strip(), f"{job}: {name} has no help text"
        if "--device" in action.option_strings:
            assert action.help.startswith("auto | cpu | cuda | cuda:N"), f"{job}: --device reads {action.help!r}"
            # simulate keeps cpu (said in its help): CUDA's random numbers would give another movie per seed
            want = {"simulate": "cpu", "train": None}.get(job, "auto")  # train: None is the config's, else auto
            assert action.default == want, f"{job}: --device {action.default!r}"
    text = parser.format_help()
    assert "``" not in text, f"{job}: --help shows reStructuredText markup"
    assert "%(default)" not in text


def test_threshold_help_names_the_real_default() -> None:
    from decode_mem.infer.__main__ import build_parser
    from decode_mem.postprocess import PostprocessConfig

    (action,) = [a for a in build_parser()._actions if "--threshold" in a.option_strings]
    assert f"default {PostprocessConfig().threshold:g}" in action.help


def test_pipeline_description_names_every_step() -> None:
    from decode_mem.pipeline.__main__ import build_parser

    text = build_parser().description
    for step in ("simulate", "train", "infer", "drift", "evaluate", "render", "report"):
        assert step in text
