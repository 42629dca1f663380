"""Damaged inputs (``decode_mem.io.damage``): a TIFF cut by a crash gives its complete frames; NaN/inf pixels, missing
zarr chunks and unreadable frame files are repaired in place (frame numbers kept) and recorded; offline and
``--follow`` agree. These small movies are damaged beyond the default budget (5 % of the frames), so they are
opened with ``max_damage=MORE``; the budget itself: ``test_damage_budget.py``."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

from decode_mem.io import open_stack
from decode_mem.io.follow import FollowedStack, open_growing

MORE = 0.5  # repairs may cover half of these movies' frames


def movie(n: int = 6, h: int = 12, w: int = 10, dtype: str = "uint16", seed: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).integers(100, 1000, (n, h, w)).astype(dtype)


def followed(path: Path) -> tuple[np.ndarray, FollowedStack]:
    """Every frame ``--follow`` reads of a finished input (idle timeout 0), and the followed stack."""
    f = FollowedStack(open_growing(path), idle_timeout=0.0)
    n = f.wait_for(10**6)
    frames = f.read(0, n)
    f.close()
    return frames, f


def cut_offsets(path: Path, pages: int = 2, n: int = 10) -> list[int]:
    """``n`` offsets spread over the last ``pages`` pages of a file (their IFDs, tag values and pixels)."""
    with tifffile.TiffFile(path) as tif:
        start = tif.pages[len(tif.pages) - pages].offset
    size = path.stat().st_size
    return sorted({int(x) for x in np.linspace(start + 1, size - 1, n)})


def complete_pages(path: Path, cut: int) -> int:
    """Pages of the uncut file whose IFD and pixels end before ``cut``."""
    with tifffile.TiffFile(path) as tif:
        return sum(1 for p in tif.pages if max(o + c for o, c in zip(p.dataoffsets, p.databytecounts,
                                                                       strict=True)) <= cut and p.offset < cut)


def cut_copies(whole: Path, frames: np.ndarray, tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """Copies of ``whole`` cut at ``cut_offsets``, each with the frames it still holds whole (checked against
    ``frames``: the last one or two pages are cut)."""
    data = whole.read_bytes()
    offsets = cut_offsets(whole)
    assert len(offsets) == 10
    for cut in offsets:
        path = tmp_path / f"cut{cut}.tif"
        path.write_bytes(data[:cut])
        n = complete_pages(whole, cut)
        assert n in (len(frames) - 2, len(frames) - 1)
        yield path, n


def test_a_page_by_page_tiff_cut_at_ten_offsets_gives_its_complete_frames(tmp_path):
    frames = movie()
    whole = tmp_path / "whole.tif"
    for f in frames:
        tifffile.imwrite(whole, f, append=True)
    for path, n in cut_copies(whole, frames, tmp_path):
        with open_stack(path) as stack:
            np.testing.assert_array_equal(stack[:], frames[:n])
            (line,) = stack.notes()
            assert f"the stack ends with frame {n - 1}, the last complete one" in line
            assert stack.reader_notes == []  # a choice of the reader's, not damage: none here
            assert [d.frame for d in stack.damage.records] == [n]
        live, f = followed(path)  # --follow reads the same frames and says the same
        np.testing.assert_array_equal(live, frames[:n])
        assert any("incomplete" in w for w in f.growing.warnings)


def test_a_one_write_tiff_cut_at_ten_offsets_gives_the_frames_its_data_hold(tmp_path):
    """tifffile writes a stack's pixels contiguously, the later pages' IFDs after them: the frames whose pixels
    are all there are read, whether the cut is in the pixels or in the IFDs after them."""
    frames = movie(5, 16, 16)
    whole = tmp_path / "whole.tif"
    tifffile.imwrite(whole, frames)
    data = whole.read_bytes()
    with tifffile.TiffFile(whole) as tif:
        offset, frame_bytes = tif.series[0].dataoffset, frames[0].nbytes
    for cut in np.linspace(offset + 3 * frame_bytes + 1, len(data) - 1, 10).astype(int):
        path = tmp_path / "cut.tif"
        path.write_bytes(data[:cut])
        n = min(len(frames), (cut - offset) // frame_bytes)
        with open_stack(path) as stack:
            np.testing.assert_array_equal(stack[:], frames[:n])
            if n < len(frames):
                assert f"the stack ends with frame {n - 1}" in stack.notes()[0]


@pytest.fixture
def nan_movie() -> np.ndarray:
    frames = movie(8, 16, 16, dtype="float32")
    frames[3] = np.nan  # one frame all NaN
    rng = np.random.default_rng(0)
    flat = frames[5].ravel()
    flat[rng.choice(flat.size, 50, replace=False)] = np.nan  # 50 NaN pixels
    frames[6, 0, :4] = [np.inf, -np.inf, np.inf, np.nan]
    return frames


def test_nan_and_inf_frames_and_pixels_are_repaired_and_named(tmp_path, nan_movie):
    path = tmp_path / "nan.tif"
    for f in nan_movie:  # page by page, so that --follow reads it the same way
        tifffile.imwrite(path, f, append=True)
    with open_stack(path, max_damage=MORE) as stack:
        got = stack[:]
        records = stack.damage.records
        line = stack.notes()[0]
    assert np.isfinite(got).all()
    good = np.isfinite(nan_movie)
    np.testing.assert_array_equal(got[good], nan_movie[good])  # good pixels untouched, frames not renumbered
    level = np.median(nan_movie[0])
    assert (got[3] == level).all()  # a flat frame at the stack's level: no spot in it
    assert (got[5][~good[5]] == np.median(nan_movie[5][good[5]])).all()
    assert [(d.frame, d.what.split(" pixels")[0]) for d in records] == [(3, "256 of 256"), (5, "50 of 256"),
                                                                         (6, "4 of 256")]
    assert "3 damaged frame record(s): frame 3" in line
    live, f = followed(path)
    np.testing.assert_array_equal(live, got)
    assert [d.frame for d in f.damage_log().records] == [3, 5, 6]


def test_the_damage_record_of_a_pickled_stack_is_its_own(tmp_path, nan_movie):
    """A stack sent to a dask worker opens there and records what it reads there (the worker sends it back)."""
    np.save(tmp_path / "nan.npy", nan_movie)
    stack = open_stack(tmp_path / "nan.npy", max_damage=MORE)
    stack[:4]
    copy = pickle.loads(pickle.dumps(stack))
    assert not copy.damage
    copy[4:8]
    assert [d.frame for d in copy.damage.records] == [5, 6]
    assert [d.frame for d in stack.damage.records] == [3]


def zarr_with_missing_chunks(path: Path, frames: np.ndarray, chunks: tuple[int, ...], delete: list[tuple]) -> None:
    array = zarr.create_array(str(path), shape=frames.shape, chunks=chunks, dtype=frames.dtype, fill_value=0,
                              zarr_format=3)
    array[:] = frames
    for coords in delete:
        chunk = path.joinpath("c", *map(str, coords))
        assert chunk.is_file()
        chunk.unlink()


def test_a_zarr_with_a_missing_chunk_is_repaired_not_read_as_zeros(tmp_path):
    frames = movie(8, 16, 16)
    path = tmp_path / "m.zarr"
    zarr_with_missing_chunks(path, frames, (2, 8, 16), [(1, 0, 0), (1, 1, 0), (2, 1, 0)])
    with open_stack(path, max_damage=MORE) as stack:
        got = stack[:]
        records = stack.damage.records
    assert 0 not in got  # zarr alone returns the fill value (0) for the missing chunks
    level = np.median(frames[0])
    assert (got[2:4] == np.rint(level)).all()  # frames 2, 3: both chunks missing
    np.testing.assert_array_equal(got[4:6, :8], frames[4:6, :8])  # frames 4, 5: the lower half is missing
    assert (got[4, 8:] == np.rint(np.median(frames[4, :8]))).all()
    np.testing.assert_array_equal(got[[0, 1, 6, 7]], frames[[0, 1, 6, 7]])
    assert [d.frame for d in records] == [2, 3, 4, 5]
    assert "chunk(s) missing" in records[0].what
    live, _ = followed(path)
    np.testing.assert_array_equal(live, got)


def test_a_zarr_whose_last_chunks_were_never_written_ends_with_its_last_chunk(tmp_path):
    frames = movie(8, 8, 8)
    path = tmp_path / "m.zarr"
    zarr_with_missing_chunks(path, frames, (2, 8, 8), [(3, 0, 0), (2, 0, 0)])
    with open_stack(path) as stack:
        np.testing.assert_array_equal(stack[:], frames[:4])
        assert "frames 4..7 left out" in stack.notes()[0]
    live, _ = followed(path)
    np.testing.assert_array_equal(live, frames[:4])


def test_a_folder_with_an_unreadable_frame_file(tmp_path):
    frames = movie(6)
    folder = tmp_path / "frames"
    folder.mkdir()
    for t, f in enumerate(frames):
        tifffile.imwrite(folder / f"f{t:02d}.tif", f)
    (folder / "f02.tif").write_bytes(b"II*\0garbage")  # a frame file the writer could not finish
    (folder / "f04.tif").write_bytes((folder / "f04.tif").read_bytes()[:-7])  # same size class broken: cut
    with open_stack(folder, max_damage=MORE) as stack:
        got = stack[:]
        records = stack.damage.records
        line = stack.notes()[0]
    assert got.shape == frames.shape  # the frames keep their numbers
    level = np.rint(np.median(frames[0]))
    assert (got[2] == level).all() and (got[4] == level).all()
    np.testing.assert_array_equal(got[[0, 1, 3, 5]], frames[[0, 1, 3, 5]])
    assert [d.frame for d in records] == [2, 4] and "f02.tif" in records[0].what
    assert "frame 2: its file cannot be read" in line
    live, _ = followed(folder)
    np.testing.assert_array_equal(live, got)


def test_a_folder_whose_last_file_is_cut_ends_before_it(tmp_path):
    frames = movie(4)
    folder = tmp_path / "frames"
    folder.mkdir()
    for t, f in enumerate(frames):
        tifffile.imwrite(folder / f"f{t}.tif", f)
    (folder / "f3.tif").write_bytes(b"II*\0")
    with open_stack(folder) as stack:
        np.testing.assert_array_equal(stack[:], frames[:3])
    live, f = followed(folder)
    np.testing.assert_array_equal(live, frames[:3])
    assert any("f3.tif" in w and "left out" in w for w in f.growing.warnings)


@pytest.mark.parametrize("one_write", [False, True], ids=["page_by_page", "one_write"])
def test_a_compressed_tiff_gives_every_frame_and_when_cut_its_complete_ones(tmp_path, one_write):
    """Compressed pages, which the page reader does not decode: every frame of a file grown page by page (it used
    to open as its first frame, silently), and a file cut at ten offsets in its last pages gives its complete
    frames with the cut recorded (it used to be refused whole)."""
    frames = movie()
    whole = tmp_path / "whole.tif"
    if one_write:
        tifffile.imwrite(whole, frames, compression="zlib")
    else:
        for f in frames:
            tifffile.imwrite(whole, f, compression="zlib", append=True)
    with open_stack(whole) as stack:
        np.testing.assert_array_equal(stack[:], frames)
        assert not stack.damage and stack.notes() == []
    for path, n in cut_copies(whole, frames, tmp_path):
        with open_stack(path) as stack:
            np.testing.assert_array_equal(stack[:], frames[:n])
            assert [d.frame for d in stack.damage.records] == [n]
            (line,) = stack.notes()
            assert f"the stack ends with frame {n - 1}, the last complete one" in line


def test_a_zarr_read_asks_the_store_only_about_chunks_its_listing_lacks(tmp_path, monkeypatch):
    """The open lists the store once; reads check that listing (a remote store's round trip per chunk otherwise):
    a complete part is asked nothing, a missing chunk once, and a chunk written after the open is found."""
    import decode_mem.io._zarr as zarr_backend

    frames = movie(8, 16, 16)
    path = tmp_path / "m.zarr"
    zarr_with_missing_chunks(path, frames, (2, 8, 16), [(1, 0, 0), (3, 1, 0)])
    asked = []
    real = zarr_backend.chunk_exists
    monkeypatch.setattr(zarr_backend, "chunk_exists", lambda array, coords: asked.append(coords) or real(array, coords))
    with open_stack(path, max_damage=MORE) as stack:
        np.testing.assert_array_equal(stack[4:6], frames[4:6])  # every chunk listed
        assert asked == []
        stack[2:4]
        stack[0:4]
        assert asked == [(1, 0, 0)]  # the missing one, once
        assert [d.frame for d in stack.damage.records] == [2, 3]
        zarr.open_array(str(path), mode="r+")[6:8] = frames[6:8]  # the writer catches up after the open
        np.testing.assert_array_equal(stack[6:8], frames[6:8])  # found by asking the store
        assert asked == [(1, 0, 0), (3, 1, 0)] and [d.frame for d in stack.damage.records] == [2, 3]
