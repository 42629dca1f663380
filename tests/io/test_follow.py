"""Growing stacks (``decode_mem.io.follow``): never a frame that is not complete, the same blocks as a finished
stack, and the idle timeout."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile

from decode_mem.errors import StackError
from decode_mem.io.blocks import edge_blocks
from decode_mem.io.follow import FollowedStack, open_growing
from decode_mem.io.growing_folder import FrameFolder
from decode_mem.io.growing_tiff import GrowingTiff, successor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from live_writer import TiffAppender  # the tests' camera stand-in


def movie(n: int = 5, h: int = 12, w: int = 10) -> np.ndarray:
    return np.random.default_rng(1).integers(100, 60000, (n, h, w)).astype(np.uint16)


def write_tiff(path: Path, frames: np.ndarray, big: bool = False) -> None:
    """The whole movie written page by page by the camera stand-in."""
    appender = TiffAppender(path, big=big)
    for f in frames:
        appender.append(f)
    appender.close()


@pytest.mark.parametrize("big", [False, True])
def test_a_tiff_read_while_its_bytes_arrive_gives_only_complete_pages(tmp_path, big):
    """Every prefix of a file written page by page (next-IFD offsets pointing past the end, IFDs and pixels cut
    anywhere) yields only pages whose bytes are all there and whose successor is linked, with their exact pixels."""
    frames = movie()
    ref = tmp_path / "ref.tif"
    write_tiff(ref, frames, big=big)
    data = ref.read_bytes()
    np.testing.assert_array_equal(tifffile.imread(ref), frames)  # the stand-in writes valid TIFF
    grow = tmp_path / "grow.tif"
    grow.write_bytes(b"")
    reader = GrowingTiff(grow)
    with tifffile.TiffFile(ref) as t:  # the byte after each page's pixels
        page_end = [p.dataoffsets[0] + p.databytecounts[0] for p in t.pages]
    seen = 0
    for cut in range(0, len(data) + 1, 7):
        with open(grow, "ab") as fh:
            fh.write(data[grow.stat().st_size:cut])
        n = reader.poll()
        complete_after = sum(end <= cut for end in page_end)
        assert seen <= n <= complete_after
        seen = n
        if n:
            np.testing.assert_array_equal(reader.read(n - 1, n), frames[n - 1:n])
    with open(grow, "ab") as fh:
        fh.write(data[grow.stat().st_size:])
    assert reader.poll() == len(frames) - 1
    assert reader.poll(final=True) == len(frames) and not reader.warnings
    np.testing.assert_array_equal(reader.read(0, len(frames)), frames)


def test_a_half_written_last_page_is_left_out_at_the_end_with_a_warning(tmp_path):
    frames = movie(3)
    path = tmp_path / "m.tif"
    write_tiff(path, frames)
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size - 50)  # the writer died in the middle of the last page's pixels
    reader = GrowingTiff(path)
    assert reader.poll(final=True) == 2
    assert "incomplete" in reader.warnings[0] and str(path) in reader.warnings[0]


def test_compressed_pages_are_refused_with_the_file_named(tmp_path):
    path = tmp_path / "c.tif"
    tifffile.imwrite(path, movie(2), compression="zlib")
    with pytest.raises(StackError, match=r"c\.tif.*compressed"):
        GrowingTiff(path).poll(final=True)


def test_micro_manager_roll_over_names():
    assert successor(Path("a/run_MMStack_Pos0.ome.tif"), 1).name == "run_MMStack_Pos0_1.ome.tif"
    assert successor(Path("run_MMStack_Pos0_1.ome.tif"), 2).name == "run_MMStack_Pos0_2.ome.tif"
    assert successor(Path("movie.tiff"), 3).name == "movie_3.tiff"


@pytest.mark.parametrize("length", [1, 2, 3, 5])
@pytest.mark.parametrize("start", [0, 3])
def test_followed_blocks_are_the_finished_stacks_blocks(tmp_path, length, start):
    frames = movie(11)
    path = tmp_path / "m.tif"
    write_tiff(path, frames)
    followed = FollowedStack(open_growing(path), idle_timeout=0.01, start=start, poll_s=0.001)
    got = list(followed.blocks(length, context=1))
    want = [(t0 + start, b) for t0, b in edge_blocks(lambda lo, hi: frames[lo:hi], 11, length, 1, start=start)]
    assert [t for t, _ in got] == [t for t, _ in want]
    for (_, a), (_, b) in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert followed.ended_by == "idle"


def test_the_idle_timeout_counts_from_the_last_byte(tmp_path):
    """A fake clock: the run ends exactly when nothing has changed for idle_timeout, and each change restarts it."""
    now = [0.0]
    folder = tmp_path / "frames"
    folder.mkdir()
    for t in range(3):
        tifffile.imwrite(folder / f"f_{t}.tif", movie(1)[0])

    def sleep(s: float) -> None:
        now[0] += s
        if abs(now[0] - 2.0) < 1e-9:  # a new file arrives 2 s in: the idle time starts again
            tifffile.imwrite(folder / "f_3.tif", movie(1)[0])

    followed = FollowedStack(FrameFolder(folder), idle_timeout=5.0, poll_s=0.5, clock=lambda: now[0], sleep=sleep)
    assert followed.wait_for(100) == 4
    assert followed.ended and now[0] == pytest.approx(7.0)


def test_a_zarr_array_counts_a_chunk_once_the_next_one_exists(tmp_path):
    zarr = pytest.importorskip("zarr")
    frames = movie(10)
    array = zarr.create_array(str(tmp_path / "m.zarr"), shape=(0, 12, 10), chunks=(4, 12, 10), dtype="u2")
    reader = open_growing(tmp_path / "m.zarr")
    array.resize((8, 12, 10))  # the shape grows before any chunk is written: nothing is complete
    assert reader.poll() == 0
    array[0:2] = frames[0:2]  # half a chunk
    assert reader.poll() == 0
    array[2:6] = frames[2:6]  # chunk 0 done, chunk 1 started
    assert reader.poll() == 4
    np.testing.assert_array_equal(reader.read(0, 4), frames[:4])
    assert reader.poll(final=True) == 8  # the end: every chunk present is complete, up to the shape


def test_a_zarr_array_created_empty_is_no_frames_yet_not_an_error(tmp_path):
    zarr = pytest.importorskip("zarr")
    from decode_mem.io.stack import open_stack

    frames = movie(8)
    array = zarr.create_array(str(tmp_path / "m.zarr"), shape=(0, 12, 10), chunks=(4, 12, 10), dtype="u2")
    with pytest.raises(StackError, match="empty stack"):  # a finished file with no frames stays an error
        open_stack(tmp_path / "m.zarr")
    reader = open_growing(tmp_path / "m.zarr")
    assert reader.poll() == 0  # polled before the writer appended anything (the live test's race)
    array.append(frames)
    assert reader.poll(final=True) == 8
    np.testing.assert_array_equal(reader.read(0, 8), frames)


def test_a_folder_takes_files_in_natural_order_and_reports_late_ones(tmp_path):
    frames = movie(4)
    for t in (1, 2, 10):
        tifffile.imwrite(tmp_path / f"frame_{t}.tif", frames[t % 4])
    reader = FrameFolder(tmp_path)
    assert reader.poll() == 2  # frame_10 may still be written
    tifffile.imwrite(tmp_path / "frame_0.tif", frames[0])  # sorts before files already taken
    (tmp_path / "frame_11.tif").write_bytes(b"II*\0")  # half a file at the end of the acquisition
    assert reader.poll(final=True) == 3
    assert any("1 file(s) arrived after frame_2.tif" in w for w in reader.warnings)
    assert any("frame_11.tif" in w and "left out" in w for w in reader.warnings)
    np.testing.assert_array_equal(reader.read(0, 3), frames[[1, 2, 2]])


def test_a_long_tiff_is_read_block_by_block_with_its_offsets_compacted(tmp_path):
    """Thousands of pages: the offsets of frames read are dropped in bulk and every block still reads right."""
    frames = np.random.default_rng(2).integers(0, 60000, (3000, 4, 4)).astype(np.uint16)
    path = tmp_path / "long.tif"
    write_tiff(path, frames)
    reader = GrowingTiff(path)
    followed = FollowedStack(reader, idle_timeout=0.01, poll_s=0.001)
    for t0, block in followed.blocks(64, context=1):
        np.testing.assert_array_equal(block[1:-1], frames[t0:t0 + 64])
        assert reader._base + len(reader._file) == reader.n  # what is kept: every frame from _base on
    assert reader._base >= 1500  # the frames read were dropped (in bulk: half of what is kept, at least 1024)
