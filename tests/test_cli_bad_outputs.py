"""Every CLI that writes checks its outputs before any work: a read-only folder, ``--out`` naming a file where a
folder is meant (or a folder where a file is meant) is one ``error:`` line naming the path, exit 2, nothing
written; bad settings and a batch of bad inputs likewise; a value that starts with '-' reaches the flag's check."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

# job -> (argv before the output flag, the output flag, what it names)
WRITERS = {
    "simulate": (["--frames", "2", "--size", "8", "8"], "--out", "path"),
    "infer": (["stack.tif"], "--out", "folder"),
    "drift": (["locs.csv"], "--out", "folder"),
    "calibrate": (["stack.tif"], "--out", "file"),
    "fit": (["stack.tif"], "--out", "folder"),
    "train": (["--config", "train.yaml"], "--out", "folder"),
    "export": (["run"], "--out", "path"),
    "evaluate": (["pred.csv", "gt.csv"], "--json", "file"),
    "render": (["locs.csv"], "--out", "file"),
    "pipeline": (["pipe.yaml"], "--out", "folder"),
    "register": (["beads.tif", "--split", "left-right"], "--out", "file"),
}


def _main(job: str):
    return importlib.import_module(f"decode_mem.{job}.__main__").main


def _one_error_line(capsys: pytest.CaptureFixture, *needles: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    for needle in needles:
        assert needle in err[0], (needle, err[0])
    return err[0]


def _read_only_folder() -> Path:
    """A folder this process cannot write into: /sys (read-only for everyone, root included)."""
    path = Path("/sys")
    if not path.is_dir() or _writable(path):
        pytest.skip("no read-only folder on this machine")
    return path


def _writable(path: Path) -> bool:
    try:
        (path / ".probe").touch()
    except OSError:
        return False
    (path / ".probe").unlink()
    return True


@pytest.mark.parametrize("job", sorted(WRITERS))
def test_read_only_output_is_one_line_before_any_work(job: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the inputs need not exist: the output is checked first
    before, flag, kind = WRITERS[job]
    target = _read_only_folder() / "decode_mem_out" / ("x.csv" if kind == "file" else "x")
    assert _main(job)([*before, flag, str(target)]) == 2
    _one_error_line(capsys, "/sys", "cannot write")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("job", sorted(j for j, (_, _, kind) in WRITERS.items() if kind != "path"))
def test_output_of_the_wrong_kind_is_one_line_and_untouched(job: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    before, flag, kind = WRITERS[job]
    if kind == "folder":
        target = tmp_path / "a_file"
        target.write_text("keep me\n")
    else:
        target = tmp_path / "a_folder"
        target.mkdir()
    assert _main(job)([*before, flag, str(target)]) == 2
    _one_error_line(capsys, str(target), "is a file, not a folder" if kind == "folder" else "is a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    assert target.read_text() == "keep me\n" if kind == "folder" else not any(target.iterdir())


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_by_its_mode(tmp_path: Path, capsys) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    assert _main("infer")(["stack.tif", "--out", str(ro)]) == 2
    _one_error_line(capsys, str(ro), "cannot write there")
    assert not any(ro.iterdir())


def test_a_negative_value_reaches_the_flag_check(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert _main("infer")(["stack.tif", "--out", str(out), "--memory_limit", "-2GiB"]) == 2
    _one_error_line(capsys, "memory_limit must be a positive size", "-2GiB")
    assert _main("infer")(["stack.tif", "--out", str(out), "--no_such_flag"]) == 2  # a usage error: one line
    _one_error_line(capsys, "--no_such_flag", "--help")
    assert not out.exists()


BAD_SETTINGS = [
    (["--chunk_size", "0"], "chunk_size must be a positive integer"),
    (["--batch_size", "0"], "batch_size must be a positive integer"),
    (["--format", "xls"], "formats"),
    (["--camera", "nikon"], "--camera nikon: neither a preset"),
    (["--memory_limit", "-2GiB"], "memory_limit must be a positive size"),
]
INFER_ONLY = [(["--streams", "0"], "streams must be >= 1"), (["--threshold", "2"], "threshold is a probability")]


@pytest.mark.parametrize(("job", "flags", "says"), [("infer", f, s) for f, s in BAD_SETTINGS + INFER_ONLY]
                         + [("fit", f, s) for f, s in BAD_SETTINGS])
def test_bad_settings_are_found_before_any_work(job: str, flags: list[str], says: str, shipped_stack: Path,
                                                 tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert _main(job)([str(shipped_stack), "--out", str(out), "--quiet", *flags]) == 2
    _one_error_line(capsys, says)
    assert not out.exists()


def test_a_model_that_is_a_text_file(shipped_stack: Path, tmp_path: Path, capsys) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("a model? no\n")
    out = tmp_path / "out"
    assert _main("infer")([str(shipped_stack), "--out", str(out), "--model", str(text)]) == 2
    line = _one_error_line(capsys, "notes.txt", "not a PyTorch checkpoint file")
    assert "pop from" not in line and not out.exists()


def test_a_batch_of_only_bad_inputs_is_one_line_and_writes_nothing(tmp_path: Path, capsys) -> None:
    (tmp_path / "junk.tif").write_text("not an image\n")
    out = tmp_path / "out"
    assert _main("infer")([str(tmp_path / "junk.tif"), "--out", str(out), "--quiet",
                           "--memory_log_file", str(tmp_path / "m.csv")]) == 2
    _one_error_line(capsys, "junk.tif", "not an image decode_mem reads")
    assert not out.exists() and not (tmp_path / "m.csv").exists()
    assert _main("infer")([str(tmp_path / "junk.tif"), str(tmp_path / "none*.tif"), "--out", str(out)]) == 2
    _one_error_line(capsys, "none of the 2 inputs", "junk.tif", "no file matches")
    assert not out.exists()


@pytest.fixture(scope="module")
def shipped_stack(tmp_path_factory) -> Path:
    """A small EMCCD stack in the shipped model's domain (never read by these tests: they stop before)."""
    import numpy as np
    import tifffile

    path = tmp_path_factory.mktemp("stack") / "stack.tif"
    tifffile.imwrite(path, np.full((4, 16, 16), 200, np.uint16), photometric="minisblack")
    return path


def test_sizes_beyond_the_memory_limit_are_a_bad_setting_not_a_failed_stack(tmp_path: Path, capsys) -> None:
    import numpy as np
    import tifffile

    stack = tmp_path / "big.tif"
    tifffile.imwrite(stack, np.full((4, 96, 96), 200, np.uint16), photometric="minisblack")
    out = tmp_path / "out"
    assert _main("infer")([str(stack), "--out", str(out), "--quiet", "--use_chunking", "--chunk_size", "96",
                           "--batch_size", "64", "--memory_limit", "50MiB"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning: ")]  # domain
    assert len(err) == 1 and err[0].startswith("error: chunk_size 96, batch_size 64 needs") and "memory_limit" in err[0]
    assert not out.exists()  # no report.html, no folder
