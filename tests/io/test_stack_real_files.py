"""Files as acquisition software writes them: every frame, and the same frames offline (``open_stack``) and live
(``--follow``'s ``FollowedStack``): pages appended one write at a time, several series, a Micro-Manager multi-file
series, a folder of frame files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tifffile
from test_stack import write_multifile_ome

from decode_mem.io import open_stack
from decode_mem.io.follow import FollowedStack, open_growing


def movie(n: int = 7, h: int = 12, w: int = 10, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(100, 60000, (n, h, w)).astype(np.uint16)


def followed_blocks(path: Path, length: int = 3) -> list[tuple[int, np.ndarray]]:
    """The blocks ``--follow`` gives for a finished file (idle timeout 0: the acquisition is over)."""
    followed = FollowedStack(open_growing(path), idle_timeout=0.0)
    try:
        return list(followed.blocks(length, context=1))
    finally:
        followed.close()


def assert_offline_equals_follow(path: Path, expected: np.ndarray) -> None:
    with open_stack(path) as stack:
        assert stack.shape == expected.shape
        np.testing.assert_array_equal(stack[:], expected)
        offline = list(stack.blocks(3, context=1))
    live = followed_blocks(path)
    assert [t for t, _ in live] == [t for t, _ in offline]
    for (_, a), (_, b) in zip(live, offline, strict=True):
        np.testing.assert_array_equal(a, b)


def test_pages_appended_one_write_at_a_time_are_one_movie(tmp_path):
    """imwrite(..., append=True) makes one series per write: 7 series of one frame are 7 frames, not 1."""
    frames = movie()
    path = tmp_path / "appended.tif"
    for f in frames:
        tifffile.imwrite(path, f, append=True)
    with tifffile.TiffFile(path) as tif:
        assert len(tif.series) == 7  # what made open_stack read 1 frame
    assert_offline_equals_follow(path, frames)
    with open_stack(path) as stack:
        assert stack.notes() == []  # nothing left out, nothing to say


def test_stacks_appended_one_after_the_other_are_one_movie(tmp_path):
    frames = movie(9)
    path = tmp_path / "chunks.tif"
    for part in (frames[:4], frames[4:5], frames[5:]):
        tifffile.imwrite(path, part, append=True, photometric="minisblack")
    assert_offline_equals_follow(path, frames)


def test_series_of_another_size_are_left_out_with_one_line_saying_how_to_pick_them(tmp_path):
    frames = movie(5)
    path = tmp_path / "mixed.tif"
    with tifffile.TiffWriter(path) as tw:
        tw.write(frames[:3], photometric="minisblack")
        tw.write(frames[3:], photometric="minisblack")
        tw.write(movie(1, 6, 6)[0], photometric="minisblack")  # a preview image of another size
        tw.write(frames[:1], photometric="minisblack")
    with open_stack(path) as stack:
        np.testing.assert_array_equal(stack[:], frames)
        (line,) = stack.notes()
    assert "5 frames are 12x10" in line and "6x6" in line and "left out" in line and "series=k" in line
    with open_stack(path, series=3) as stack:  # the way the line names
        np.testing.assert_array_equal(stack[:], frames[:1])
    live = followed_blocks(path)  # --follow stops at the page of another size too
    np.testing.assert_array_equal(np.concatenate([f[1:-1] for _, f in live]), frames)


def write_ome_series(path: Path, *series: np.ndarray) -> Path:
    """One OME-TIFF image (series) per array."""
    with tifffile.TiffWriter(path, ome=True) as tw:
        for data in series:
            tw.write(data, metadata={"axes": "TYX"})
    return path


def test_ome_series_of_another_size_are_named_in_the_line(tmp_path):
    frames = movie(6)
    path = write_ome_series(tmp_path / "mixed.ome.tif", frames[:4], frames[4:], movie(2, 6, 6))
    with open_stack(path) as stack:
        np.testing.assert_array_equal(stack[:], frames)
        (line,) = stack.notes()
        assert stack.reader_notes == [line]  # known when opened, before any frame is read
    assert "took series 0-1" in line and "series 2 (2x6x6" in line and "series=k" in line


def test_ome_tiff_with_several_series_of_one_size(tmp_path):
    frames = movie(8)
    path = write_ome_series(tmp_path / "two.ome.tif", frames[:5], frames[5:])
    with tifffile.TiffFile(path) as tif:
        assert len(tif.series) == 2
    assert_offline_equals_follow(path, frames)


def test_micromanager_multi_file_series(tmp_path):
    """Micro-Manager's layout: ``x_MMStack.ome.tif`` rolls over to ``x_MMStack_1.ome.tif``; the OME-XML spans
    both (tifffile reads it offline, --follow goes on in the roll-over file)."""
    frames = movie(9)
    first, _ = write_multifile_ome(tmp_path, frames, split=4, names=("x_MMStack.ome.tif", "x_MMStack_1.ome.tif"))
    assert_offline_equals_follow(first, frames)


def test_a_folder_of_frame_files_is_a_movie_in_natural_order(tmp_path):
    frames = movie(12)
    folder = tmp_path / "frames"
    folder.mkdir()
    for t, f in enumerate(frames):
        tifffile.imwrite(folder / f"img_{t}.tif", f)  # img_10 after img_9
    assert_offline_equals_follow(folder, frames)
    with open_stack(folder) as stack:
        assert stack.backend == "folder" and stack.notes() == []


@pytest.mark.parametrize("per_file", [1, 3])
def test_a_folder_of_files_of_several_frames(tmp_path, per_file):
    frames = movie(9)
    folder = tmp_path / "frames"
    folder.mkdir()
    for k in range(0, 9, per_file):
        np.save(folder / f"part{k:03d}.npy", frames[k:k + per_file])
    assert_offline_equals_follow(folder, frames)


def test_a_file_of_many_writes_is_read_without_tifffile_series(tmp_path, monkeypatch):
    """tifffile makes a series of every write at a cost quadratic in their number (20 000 writes of 64x64: 256 s
    to open, measured; the page reader: 3.6 s): such a file is read page by page without asking for them."""
    frames = movie(40, 8, 8)
    path = tmp_path / "many.tif"
    with tifffile.TiffWriter(path) as tw:
        for f in frames:
            tw.write(f, photometric="minisblack")

    def no_series(self):
        raise AssertionError("tifffile's series were computed")

    monkeypatch.setattr(tifffile.TiffFile, "series", property(no_series))
    with open_stack(path) as stack:
        np.testing.assert_array_equal(stack[:], frames)
