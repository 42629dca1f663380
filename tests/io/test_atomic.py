"""atomic_output: the final name appears only on success; nothing partial survives a failure."""

from __future__ import annotations

import pytest

from decode_mem.io.atomic import atomic_output, partial_path


def test_success_renames_into_place(tmp_path) -> None:
    out = tmp_path / "sub" / "locs.csv"
    with atomic_output(out) as tmp:
        assert tmp == partial_path(out) and tmp != out
        tmp.write_text("a,b\n")
        assert not out.exists()
    assert out.read_text() == "a,b\n"
    assert not partial_path(out).exists()


def test_exception_leaves_no_final_and_no_partial(tmp_path) -> None:
    out = tmp_path / "locs.csv"
    with pytest.raises(RuntimeError), atomic_output(out) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert not out.exists() and not partial_path(out).exists()


def test_exception_keeps_the_previous_output(tmp_path) -> None:
    out = tmp_path / "locs.csv"
    out.write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic_output(out) as tmp:
        tmp.write_text("new, half")
        raise KeyboardInterrupt
    assert out.read_text() == "old" and not partial_path(out).exists()


def test_directories_replace_directories(tmp_path) -> None:
    out = tmp_path / "pred.zarr"
    out.mkdir()
    (out / "stale").write_text("x")
    with atomic_output(out) as tmp:
        tmp.mkdir()
        (tmp / "zarr.json").write_text("{}")
    assert sorted(p.name for p in out.iterdir()) == ["zarr.json"]
    assert not partial_path(out).exists()


def test_failed_directory_is_removed(tmp_path) -> None:
    out = tmp_path / "pred.zarr"
    with pytest.raises(ValueError), atomic_output(out) as tmp:
        (tmp / "c").mkdir(parents=True)
        raise ValueError
    assert not out.exists() and not partial_path(out).exists()


def test_stale_partial_from_a_killed_run_is_discarded(tmp_path) -> None:
    out = tmp_path / "locs.csv"
    partial_path(out).write_text("left over by a killed run")
    with atomic_output(out) as tmp:
        assert not tmp.exists()
        tmp.write_text("fresh")
    assert out.read_text() == "fresh"
