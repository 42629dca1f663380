"""Every job's ``--help`` has one shape: what it does, one example, the exit codes, and a unit (or the word for
a count) in the help of every number; the words a size flag accepts besides numbers are said in its help."""

from __future__ import annotations

import argparse
import importlib
import inspect
import re

import pytest

JOBS = ("simulate", "train", "infer", "evaluate", "render", "pipeline", "export", "plan", "calibrate", "fit",
        "drift", "psf", "link", "register")
# A unit, or what a dimensionless number counts / is: every int or float flag's help names one of these.
UNIT = re.compile(
    r"(\bpx\b|\bnm\b|µm|\bphotons?\b|\bADU\b|\be-|electrons|\bseconds?\b|\bminutes?\b|\bframes?\b|\bbytes\b|MiB|GiB"
    r"|%|\bfraction\b|\bfactor\b|\bprobability\b|\bdimensionless\b|\ban integer\b|\bwindows\b|\bsteps\b"
    r"|\bprocesses\b|\bthreads\b|\bblocks\b|\bbeads\b|\blocalizations\b|\bsegments\b|\bnodes\b|micro-batches"
    r"|\bemitters\b|standard deviations)")
WORDS = ("auto", "whole", "none")


def _parser(job: str) -> argparse.ArgumentParser:
    return importlib.import_module(f"decode_mem.{job}.__main__").build_parser()


def _numeric(action: argparse.Action) -> bool:
    if action.type in (int, float):
        return True
    try:  # a size flag: numbers and words ('auto', ...)
        return action.type is not None and isinstance(action.type("3"), (int, float))
    except (TypeError, ValueError, argparse.ArgumentTypeError):
        return False


def _exit_paragraph(text: str) -> str:
    found = re.search(r"^Exit codes:(.*?)(?:\n\n|\Z)", text, flags=re.S | re.M)
    return " ".join(found.group(1).split()) if found else ""


@pytest.mark.parametrize("job", JOBS)
def test_help_says_what_gives_an_example_and_the_exit_codes(job: str) -> None:
    parser = _parser(job)
    text = parser.format_help()
    assert parser.description and len(parser.description.split()) >= 8, f"{job}: no description"
    assert re.search(rf"^Examples?: python -m decode_mem\.{job}\b", text, flags=re.M), f"{job}: no example line"
    codes = _exit_paragraph(text)
    assert codes, f"{job}: no 'Exit codes:' line"
    for code in ("0 ", "2 ", "130", "143"):
        assert code in codes, f"{job}: exit codes do not say {code.strip()}: {codes}"
    body = inspect.getsource(importlib.import_module(f"decode_mem.{job}.__main__"))
    if "EXIT_SOME_FAILED" in body:  # the job can finish with some inputs failed
        assert re.search(r"\b1 ", codes), f"{job}: returns exit 1 but its help does not say when"


@pytest.mark.parametrize("job", JOBS)
def test_every_number_has_a_unit_or_says_what_it_counts(job: str) -> None:
    for action in _parser(job)._actions:
        if action.help == argparse.SUPPRESS or not _numeric(action):
            continue
        name = action.option_strings[0] if action.option_strings else action.dest
        assert UNIT.search(action.help), f"{job} {name}: no unit in {action.help!r}"
        for word in WORDS:  # the words the flag accepts besides numbers are named in its help
            try:
                accepted = action.type(word) == word
            except (TypeError, ValueError, argparse.ArgumentTypeError):
                accepted = False
            if accepted:
                assert word in action.help, f"{job} {name} accepts {word!r}, its help does not say so"


@pytest.mark.parametrize("job", ("infer", "calibrate", "fit", "psf", "simulate"))
def test_camera_help_names_no_internal_class_and_its_flags_have_units(job: str) -> None:
    actions = {s: a for a in _parser(job)._actions for s in a.option_strings}
    assert "decode_mem." not in actions["--camera"].help and "emccd" in actions["--camera"].help
    for flag in ("--baseline", "--e_per_adu", "--em_gain", "--qe", "--read_noise", "--pixel_size"):
        if flag in actions:
            assert UNIT.search(actions[flag].help), f"{job} {flag}: {actions[flag].help!r}"


def test_psf_usage_shows_z_step_as_required_with_beads() -> None:
    usage = _parser("psf").format_usage()
    assert "BEADS... --z_step NM --out psf.h5" in usage and "[--z_step" not in usage
    assert "--from_smap 3dcal.mat --out psf.h5" in usage


def test_the_unit_rule_catches_a_bare_number() -> None:
    """The rule is not vacuous: the helps this issue found ('camera baseline', 'nm' alone passes) are told apart."""
    assert not UNIT.search("camera baseline (overrides --camera / the model's)")
    assert not UNIT.search("random seed (default 0)")
    assert UNIT.search("camera offset in ADU") and UNIT.search("random seed, an integer (default 0)")


def test_docs_cli_lists_every_flag_of_every_job() -> None:
    """docs/cli.md (``python docs/make_cli.py``) holds every job and every flag the parsers have now."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M))
    for job in JOBS:
        assert job in sections, f"docs/cli.md lacks {job}: run python docs/make_cli.py"
        for action in _parser(job)._actions:
            if action.help != argparse.SUPPRESS and action.option_strings:
                flag = action.option_strings[0]
                assert flag in sections[job], f"docs/cli.md lacks {job} {flag}: run python docs/make_cli.py"
