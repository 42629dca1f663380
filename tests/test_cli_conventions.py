"""Every job's CLI has one shape: ``--help`` works and is fast (no torch), ``--debug``/``--quiet`` exist,
dashed and underscored spellings are both accepted, and bad settings exit with 2 and one ``error:`` line."""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

JOBS = ("simulate", "train", "infer", "evaluate", "render", "pipeline", "export", "plan", "calibrate", "fit",
        "drift", "psf", "register")
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


# Flags that several jobs share but that take different kinds of value: named here with the reason, so that a new
# clash fails the test below (and this list shrinks when one is renamed).
KNOWN_CLASHES = {
    "--train": "plan: a switch (plan a training run); fit: when to fine-tune (auto, always, never)",
    "--blur": "render: a blur mode; drift: a blur width in nm",
}
# Spellings renamed for one meaning per name; still accepted, not shown by --help: (job, old, new, value)
RENAMED_FLAGS = (
    ("plan", "--chunk", "--chunk_size", "128"), ("plan", "--batch", "--batch_size", "4"),
    ("plan", "--accumulation", "--accumulation_steps", "2"), ("train", "--chunk_size", "--crop_size", "64"),
    ("fit", "--budget", "--budget_minutes", "5"),
)


def _visible_flags() -> dict[str, dict[str, argparse.Action]]:
    """flag -> {job: action} for every flag that some job's --help shows."""
    flags: dict[str, dict[str, argparse.Action]] = {}
    for job in JOBS:
        for action in importlib.import_module(f"decode_mem.{job}.__main__").build_parser()._actions:
            if action.help != argparse.SUPPRESS:
                for flag in action.option_strings:
                    if flag.startswith("--") and "-" not in flag[2:]:
                        flags.setdefault(flag, {})[job] = action
    return flags


def _kind(action: argparse.Action) -> tuple:
    """What a flag takes: its action class, value type (an integer or 'auto' counts as an integer), count, choices."""
    name = getattr(action.type, "__name__", None)
    value = "int" if name in ("int", "int_or_auto", "crop_arg") else "float" if name == "float" else "text"
    return type(action).__name__, value, action.nargs, bool(action.choices)


def test_a_flag_name_means_one_thing_in_every_job() -> None:
    """A flag shared by several jobs takes the same kind of value everywhere, and the size and budget flags start
    their help with the one sentence of ``cli.MEANINGS`` (a tile core is never called a crop, minutes never bytes)."""
    from decode_mem.cli import MEANINGS

    flags = _visible_flags()
    clashes = {flag for flag, jobs in flags.items() if len({_kind(a) for a in jobs.values()}) > 1}
    assert clashes == set(KNOWN_CLASHES), {f: {j: _kind(a) for j, a in flags[f].items()} for f in clashes}
    for flag, meaning in MEANINGS.items():
        assert flag in flags, f"{flag}: in cli.MEANINGS but no job has it"
        for job, action in flags[flag].items():
            assert action.help.startswith(meaning), f"{job} {flag}: {action.help!r} does not start {meaning!r}"
    for jobs in flags.values():
        for job, action in jobs.items():  # 'budget' alone is memory (bytes); time is --budget_minutes
            if re.search(r"\bbudget\b", action.help):
                assert "minute" not in action.help, f"{job} {action.option_strings[0]}: {action.help!r}"
    assert "--chunk_size" not in flags or "train" not in flags["--chunk_size"]  # train's crops are --crop_size
    for _, old, _, _ in RENAMED_FLAGS:
        assert old not in flags or old == "--chunk_size", f"{old} is shown by --help"


@pytest.mark.parametrize(("job", "old", "new", "value"), RENAMED_FLAGS)
def test_old_flag_spellings_still_parse(job: str, old: str, new: str, value: str) -> None:
    parser = importlib.import_module(f"decode_mem.{job}.__main__").build_parser()
    required = {"plan": ["--frame", "64", "64"], "train": [], "fit": ["movie.tif", "--out", "o"]}[job]
    as_new = parser.parse_args([*required, new, value])
    assert vars(parser.parse_args([*required, old, value])) == vars(as_new)
    assert vars(parser.parse_args([*required, old.replace("_", "-"), value])) == vars(as_new)
    shown = {flag for a in parser._actions if a.help != argparse.SUPPRESS for flag in a.option_strings}
    assert new in shown and old not in shown


def test_plan_train_reads_the_old_chunk_as_the_crop_side(capsys) -> None:
    """``plan --train --chunk N`` (the old spelling) plans crops of N px, as ``--crop_size N`` does; the two
    together are one clear error."""
    from decode_mem.plan.__main__ import main

    args = ["--train", "--frame", "64", "64", "--batch_size", "2", "--val_size", "2", "--device", "cpu"]
    assert main([*args, "--crop_size", "32"]) == 0
    new = capsys.readouterr().out.splitlines()[0]  # the sizes (the memory lines measure this process's baseline)
    assert main([*args, "--chunk", "32"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == new and "crops of 32x32 px" in new
    assert main([*args, "--chunk_size", "32", "--crop_size", "32"]) == 2
    assert "give --crop_size only" in capsys.readouterr().err


# Past argparse, each job's own first check: a missing input (or an impossible number where a job reads none).
BAD_INPUTS = {
    "simulate": ["--frames", "0", "--out", "out/s.tif"], "train": ["--config", "missing.yaml", "--out", "out"],
    "infer": ["missing.tif", "--out", "out"], "evaluate": ["missing.csv", "--no_truth", "--out", "out"],
    "render": ["missing.csv", "--out", "out/x.png"], "pipeline": ["missing.yaml"],
    "export": ["missing_run", "--out", "out"], "plan": ["--frame", "0", "0"],
    "calibrate": ["missing.tif", "--out", "out/calib.yaml"], "fit": ["missing.tif", "--out", "out"],
    "drift": ["missing.csv", "--out", "out"], "psf": ["missing.tif", "--z_step", "20", "--out", "out/psf.h5"],
    "link": ["missing.csv", "--out", "out"],
    "register": ["missing.tif", "--split", "left-right", "--out", "out/reg.json"],
}


@pytest.mark.parametrize("job", (*JOBS, "link"))
def test_a_bad_input_prints_only_its_error_line_and_writes_nothing(job: str, tmp_path: Path, monkeypatch,
                                                                    capsys) -> None:
    """No note before the error (infer said which model it would take, then failed), no folder left behind (fit
    made its --out before reading the movie)."""
    monkeypatch.chdir(tmp_path)
    main = importlib.import_module(f"decode_mem.{job}.__main__").main
    assert main(BAD_INPUTS[job]) == 2
    out, err = capsys.readouterr()
    assert out == "", f"{job} printed before its error: {out!r}"
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert not any(tmp_path.iterdir()), f"{job} left {sorted(p.name for p in tmp_path.iterdir())}"


@pytest.fixture(scope="module")
def own_csv(tmp_path_factory) -> Path:
    """decode_mem's own CSV: infer on 60 frames of the sample movie (its <stem>.json beside it)."""
    import tifffile

    from decode_mem.infer.__main__ import main

    folder = tmp_path_factory.mktemp("own")
    tifffile.imwrite(folder / "movie.tif", tifffile.imread(ROOT / "data" / "sample" / "stack.tif")[:60])
    assert main([str(folder / "movie.tif"), "--out", str(folder / "locs"), "--device", "cpu", "--engine", "torch",
                 "--quiet"]) == 0  # torch: auto's first int8 build and check are not what this fixture is about
    return folder / "locs" / "movie.csv"


READERS = {  # every job that reads a localization file, on decode_mem's own CSV, without --pixel_size
    "evaluate": ["--no_truth", "--out"], "render": ["--pixel", "10", "--out"], "link": ["--out"], "drift": ["--out"],
}


@pytest.mark.parametrize("job", READERS)
def test_every_job_reads_decode_mems_own_csv_without_being_told_the_pixel(job: str, own_csv: Path, tmp_path: Path,
                                                                          capsys) -> None:
    """A CSV records no camera; the run's <stem>.json beside it does (evaluate --no_truth refused the CSV, render
    drew the localizations' extent instead of the camera's frame)."""
    main = importlib.import_module(f"decode_mem.{job}.__main__").main
    out = tmp_path / ("image.tif" if job == "render" else "out")
    rc = main([str(own_csv), *READERS[job], str(out)])
    if job == "drift":  # the sample's emitters blink at random places: drift reads the file, then finds no structure
        err = capsys.readouterr().err
        assert rc == 2 and "share no structure to register" in err and "pixel" not in err, err
        return
    assert rc == 0, capsys.readouterr().err
    if job == "render":
        import tifffile

        assert tifffile.imread(out).shape == (640, 640)  # the camera's 64 x 64 px of 100 nm in 10 nm pixels
        assert "over the camera's field" in capsys.readouterr().out
