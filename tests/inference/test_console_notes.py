"""What infer says on the console besides its progress: the model it takes without --model (once, after the checks),
what --engine auto took and why (once per run, through the observer), and --quality's numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tifffile
from infer_helpers import SAMPLE

from decode_mem.evaluate.no_truth import quality_line
from decode_mem.footprint import engines as engine_choice
from decode_mem.infer.__main__ import main


@pytest.fixture(scope="module")
def movies(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("movies")
    frames = tifffile.imread(SAMPLE)
    paths = [folder / "a.tif", folder / "b.tif"]
    tifffile.imwrite(paths[0], frames[:60])
    tifffile.imwrite(paths[1], frames[60:90])
    return paths


def test_quality_prints_its_numbers_and_the_model_note_comes_once_after_the_checks(
        movies: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "locs"
    assert main([str(movies[0]), "--out", str(out), "--device", "cpu", "--quality"]) == 0
    lines = capsys.readouterr().out.splitlines()
    summary = json.loads((out / "a.json").read_text())
    assert f"a: {quality_line(summary['quality'])}" in lines  # the numbers the summary holds, as evaluate says them
    notes = [i for i, line in enumerate(lines) if line.startswith("no --model given")]
    assert len(notes) == 1 and notes[0] < lines.index(next(x for x in lines if x.startswith("a: 60 frames")))


def test_engine_auto_says_once_what_it_chose_and_why(movies: list[Path], tmp_path: Path, monkeypatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(engine_choice, "installed", lambda name: False)  # no runtime: auto takes torch, says why
    args = [*map(str, movies), "--out", str(tmp_path / "locs"), "--device", "cpu", "--engine", "auto"]
    assert main(args) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("engine ")]
    assert said == ["engine auto: torch (no CPU runtime installed: openvino, onnxruntime; pip install -e \".[cpu]\")"]
    assert main([str(movies[1]), "--out", str(tmp_path / "torch"), "--device", "cpu", "--engine", "torch"]) == 0
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("engine ")]
