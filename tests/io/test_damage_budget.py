"""Repairs have a budget (``io.damage.MAX_DAMAGED_SHARE``, ``open_stack(max_damage=...)``): a stack whose damage covers
more than 5 % of its frames is refused in one line saying how much is damaged, when it opens where that is known then
(missing zarr chunks, unreadable frame files), else when the read finds it (NaN frames); within the budget frames are
repaired as before. A zarr store's metadata are a claim: what it holds is found from its keys, not from a loop over
the frames it claims."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

from decode_mem.errors import StackError
from decode_mem.io import open_stack
from decode_mem.io.damage import MAX_DAMAGED_SHARE


def movie(n: int = 40, h: int = 8, w: int = 8, dtype: str = "float32") -> np.ndarray:
    return np.random.default_rng(2).integers(100, 400, (n, h, w)).astype(dtype)


def one_line_naming(err: pytest.ExceptionInfo, path: Path) -> str:
    text = str(err.value)
    assert text.startswith(str(path)) and "\n" not in text
    return text


def test_the_default_share_is_five_percent():
    assert MAX_DAMAGED_SHARE == 0.05


def test_nan_frames_within_the_budget_are_repaired_beyond_it_refused_when_read(tmp_path):
    frames = movie()
    frames[[5, 30]] = np.nan  # 2 of 40: 5 %, the budget
    np.save(tmp_path / "two.npy", frames)
    with open_stack(tmp_path / "two.npy") as stack:
        got = stack[:]
        assert np.isfinite(got).all() and stack.damage.repaired_frames() == 2
    frames[17] = np.nan  # 3 of 40
    np.save(tmp_path / "three.npy", frames)
    with open_stack(tmp_path / "three.npy") as stack, pytest.raises(StackError) as err:  # opening reads no pixel
        for _ in stack.blocks(8):
            pass
    text = one_line_naming(err, tmp_path / "three.npy")
    assert "3 of its 40 frames are damaged (7.5%" in text and "at most 5%" in text
    with open_stack(tmp_path / "three.npy", max_damage=0.1) as stack:  # the share is a setting
        assert np.isfinite(stack[:]).all() and stack.damage.repaired_frames() == 3


def zarr_store(path: Path, frames: np.ndarray, chunks: tuple[int, ...], fmt: int = 3) -> Path:
    array = zarr.create_array(str(path), shape=frames.shape, chunks=chunks, dtype=frames.dtype, zarr_format=fmt)
    array[:] = frames
    return path


def test_a_zarr_store_missing_chunks_beyond_the_budget_is_refused_when_it_opens(tmp_path):
    path = zarr_store(tmp_path / "m.zarr", movie(dtype="uint16"), (2, 8, 8))
    (path / "c" / "3" / "0" / "0").unlink()  # frames 6, 7: 5 %
    with open_stack(path) as stack:
        got = stack[:]
        assert (got[6:8] == np.median(got[0])).all() and stack.damage.repaired_frames() == 2
    (path / "c" / "9" / "0" / "0").unlink()  # frames 18, 19 too: 10 %
    with pytest.raises(StackError) as err:
        open_stack(path)
    assert "4 of its 40 frames are damaged (10.0%: chunks missing from the zarr store" in one_line_naming(err, path)


def test_a_zarr_store_claiming_far_more_frames_than_it_holds_opens_at_once(tmp_path):
    """The metadata say 2**40 frames, the store holds 40: the stack ends with its last chunk, found from the store's
    keys (it used to be looked for chunk by chunk from the claimed end: a run that never ended)."""
    for fmt, meta in ((2, ".zarray"), (3, "zarr.json")):
        path = zarr_store(tmp_path / f"v{fmt}.zarr", movie(dtype="uint16"), (2, 8, 8), fmt)
        claim = json.loads((path / meta).read_text())
        claim["shape"][0] = 2**40
        (path / meta).write_text(json.dumps(claim))
        start = time.monotonic()
        with open_stack(path) as stack:
            assert stack.shape == (40, 8, 8)
            assert "frames 40..1099511627775 left out" in stack.notes()[0]
        assert time.monotonic() - start < 5


def test_a_zarr_store_claiming_larger_frames_than_it_holds_is_refused(tmp_path):
    path = zarr_store(tmp_path / "m.zarr", movie(dtype="uint16"), (2, 8, 8))
    claim = json.loads((path / "zarr.json").read_text())
    claim["shape"][1] = 8000  # 1000 chunks per frame claimed, one stored
    (path / "zarr.json").write_text(json.dumps(claim))
    with pytest.raises(StackError) as err:
        open_stack(path)
    assert "40 of its 40 frames are damaged" in one_line_naming(err, path)


def test_a_zarr_chunk_of_no_size_is_one_line(tmp_path):
    path = zarr_store(tmp_path / "m.zarr", movie(dtype="uint16"), (2, 8, 8))
    claim = json.loads((path / "zarr.json").read_text())
    claim["chunk_grid"]["configuration"]["chunk_shape"][1] = 0  # was a ZeroDivisionError
    (path / "zarr.json").write_text(json.dumps(claim))
    with pytest.raises(StackError) as err:
        open_stack(path)
    assert "every chunk must be at least 1" in one_line_naming(err, path)


def test_a_folder_with_unreadable_frame_files_beyond_the_budget_is_refused_when_it_opens(tmp_path):
    folder = tmp_path / "frames"
    folder.mkdir()
    for t, frame in enumerate(movie(dtype="uint16")):
        tifffile.imwrite(folder / f"f{t:02d}.tif", frame)
    for t in (3, 11, 20):  # 3 of 40: beyond 5 %
        (folder / f"f{t:02d}.tif").write_bytes(b"II*\0 not a frame")
    with pytest.raises(StackError) as err:
        open_stack(folder)
    assert "3 of its 40 frames are damaged (7.5%: frame files that cannot be read" in one_line_naming(err, folder)
    with open_stack(folder, max_damage=0.1) as stack:
        assert len(stack) == 40


@pytest.mark.parametrize("share", [-0.1, 1.5, "5%", True])
def test_the_share_is_a_share(tmp_path, share):
    np.save(tmp_path / "m.npy", movie())
    with pytest.raises(StackError, match="max_damage must be a share of the frames between 0 and 1"):
        open_stack(tmp_path / "m.npy", max_damage=share)
