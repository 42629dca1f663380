"""Bad input raises StackError naming the file and the problem, chained to the library's error."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr
from test_stack import movie, write_multifile_ome

from decode_mem.errors import StackError
from decode_mem.io import _tiff, open_stack


def open_and_read_all(path: Path, **kwargs) -> None:
    with open_stack(path, **kwargs) as stack:
        stack.read(0, len(stack))


def test_missing_file(tmp_path) -> None:
    with pytest.raises(StackError, match=r"nope\.tif: no such file"):
        open_stack(tmp_path / "nope.tif")


@pytest.mark.parametrize(("content", "problem"),
                         [(b"", "empty file"), (b"hello, world\n", "not an image decode_mem reads")])
def test_not_an_image(tmp_path, content, problem) -> None:
    (tmp_path / "x.tif").write_bytes(content)
    with pytest.raises(StackError, match=problem) as err:
        open_stack(tmp_path / "x.tif")
    assert "x.tif" in str(err.value)


def test_directory_that_is_not_zarr(tmp_path) -> None:
    with pytest.raises(StackError, match="not a readable zarr") as err:
        open_stack(tmp_path)
    assert err.value.__cause__ is not None


def test_tiff_header_only(tmp_path) -> None:
    tifffile.imwrite(tmp_path / "m.tif", movie())
    (tmp_path / "h.tif").write_bytes((tmp_path / "m.tif").read_bytes()[:16])
    with pytest.raises(StackError, match=r"h\.tif") as err:
        open_stack(tmp_path / "h.tif")
    assert err.value.__cause__ is not None


@pytest.mark.parametrize("keep", [0.5, 0.9])
def test_a_truncated_compressed_tiff_gives_its_complete_frames(tmp_path, keep) -> None:
    """Compressed pages are decoded by tifffile page by page: a cut compressed file gives its complete frames and
    records the cut (it was refused whole; uncompressed cut files: tests/io/test_damaged_inputs.py)."""
    path = tmp_path / "t.tif"
    data = movie()
    tifffile.imwrite(path, data, compression="zlib")
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(int(size * keep))
    with tifffile.TiffFile(tmp_path / "t.tif") as tif:  # frames whose pixels the cut file still holds
        whole = sum(1 for p in tif.pages if p is not None and max(o + n for o, n in zip(
            p.dataoffsets, p.databytecounts, strict=True)) <= int(size * keep))
    with open_stack(path) as stack:
        assert 0 < len(stack) == whole < len(data)
        np.testing.assert_array_equal(stack[:], data[:whole])
        assert [d.frame for d in stack.damage.records] == [whole]


def test_truncated_imagej_hyperstack_gives_its_complete_time_points(tmp_path) -> None:
    path = tmp_path / "h.tif"
    data = movie((4, 2, 16, 16))
    tifffile.imwrite(path, data, imagej=True, metadata={"axes": "TCYX"})
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size // 2)  # inside the (contiguous) image data: 2 of 4 time points whole
    with open_stack(path, channel=1) as stack:
        np.testing.assert_array_equal(stack[:], data[:2, 1])
        assert [d.frame for d in stack.damage.records] == [2]
        assert "the stack ends with frame 1" in stack.notes()[0]


def test_tifffile_log_data_loss_is_fatal_vendor_metadata_noise_is_a_warning(tmp_path) -> None:
    logger = logging.getLogger("tifffile")
    with (pytest.warns(UserWarning, match=r"x\.tif: tifffile: .*failed to read display settings"),
          _tiff._tifffile_log(tmp_path / "x.tif") as log):
        logger.warning("<tifffile.read_micromanager_metadata> failed to read display settings, raised KeyError")
        logger.warning("<tifffile.TiffFile 'x.tif'> OME series is missing 3 frames. Missing data are zeroed")
    assert [_tiff.is_fatal(m) for m in log] == [False, True]


def test_multifile_ome_with_a_missing_part_is_not_zero_filled(tmp_path) -> None:
    first, second = write_multifile_ome(tmp_path, movie(), split=3)
    second.unlink()  # tifffile would log a warning and return zeros for the missing frames
    with pytest.raises(StackError, match=r"part1\.ome\.tif"):
        open_stack(first)


@pytest.mark.parametrize("shape", [(0, 8, 8), (3, 0, 8)])
def test_empty_stack(tmp_path, shape) -> None:
    np.save(tmp_path / "e.npy", np.zeros(shape, np.uint16))
    with pytest.raises(StackError, match=r"e\.npy: empty stack"):
        open_stack(tmp_path / "e.npy")


def test_zero_frames_zarr(tmp_path) -> None:
    zarr.create_array(tmp_path / "e.zarr", shape=(0, 8, 8), dtype="uint16")
    with pytest.raises(StackError, match="empty stack"):
        open_stack(tmp_path / "e.zarr")


@pytest.mark.parametrize("dtype", ["complex64", "bool"])
def test_unsupported_dtype(tmp_path, dtype) -> None:
    np.save(tmp_path / "d.npy", np.zeros((2, 4, 4), dtype))
    with pytest.raises(StackError, match=rf"d\.npy: unsupported pixel type {dtype}"):
        open_stack(tmp_path / "d.npy")


def test_object_npy_is_refused_without_unpickling(tmp_path) -> None:
    np.save(tmp_path / "o.npy", np.array([[{"a": 1}]], dtype=object), allow_pickle=True)
    with pytest.raises(StackError, match=r"o\.npy: unreadable \.npy") as err:
        open_stack(tmp_path / "o.npy")
    assert err.value.__cause__ is not None


@pytest.mark.parametrize("writer", ["npy", "tiff", "tiff-zlib", "zarr"])
def test_nan_is_repaired_and_recorded_with_the_frame_when_read(tmp_path, writer) -> None:
    """NaN/inf no longer fail the stack: the pixels become the frame's median, the frame is recorded."""
    data = movie((6, 8, 8), dtype="float32")
    data[4, 2, 3] = np.nan
    data[5, 0, 0] = np.inf
    path = tmp_path / {"npy": "f.npy", "zarr": "f.zarr"}.get(writer, "f.tif")
    if writer == "npy":
        np.save(path, data)
    elif writer == "zarr":
        zarr.create_array(path, shape=data.shape, dtype=data.dtype)[:] = data
    else:
        tifffile.imwrite(path, data, compression="zlib" if writer == "tiff-zlib" else None)
    stack = open_stack(path, max_damage=0.5)  # opening does not read pixels; 2 of 6 frames: over the 5 % default
    np.testing.assert_array_equal(stack.read(0, 4), data[:4])
    assert not stack.damage
    got = stack.read(2, 6)
    assert np.isfinite(got).all()
    assert got[2, 2, 3] == np.median(np.delete(data[4].ravel(), 2 * 8 + 3))
    assert stack[5][0, 0] == np.median(data[5].ravel()[1:])
    np.testing.assert_array_equal(stack[::-1][0], stack[5])
    assert [d.frame for d in stack.damage.records] == [4, 5]
    assert all(np.isfinite(frames).all() for _, frames in stack.blocks(2))
    assert "frame 4: 1 of 64 pixels NaN or infinite" in stack.notes()[0]


def test_ambiguous_hyperstack_says_which_arguments_to_pass(tmp_path) -> None:
    tifffile.imwrite(tmp_path / "h.tif", movie((3, 2, 4, 8, 8)), imagej=True, metadata={"axes": "TZCYX"})
    with pytest.raises(StackError, match=r"h\.tif: .*pass z= \(axis Z has 2 entries\); pass channel= \(axis C has 4"):
        open_stack(tmp_path / "h.tif")
    with pytest.raises(StackError, match="pass z="):
        open_stack(tmp_path / "h.tif", channel=1)
    assert open_stack(tmp_path / "h.tif", channel=1, z=0).shape == (3, 8, 8)


def test_rgb_image_asks_for_a_channel(tmp_path) -> None:
    tifffile.imwrite(tmp_path / "rgb.tif", movie((8, 9, 3), dtype="uint8"), photometric="rgb")
    with pytest.raises(StackError, match=r"rgb\.tif: .*RGB.*pass channel="):
        open_stack(tmp_path / "rgb.tif")
    assert open_stack(tmp_path / "rgb.tif", channel=1).shape == (1, 8, 9)


def test_unlabelled_rgb_npy_asks_for_a_channel(tmp_path) -> None:
    np.save(tmp_path / "rgb.npy", movie((5, 8, 9, 3), dtype="uint8"))
    with pytest.raises(StackError, match=r"RGB.*pass channel="):
        open_stack(tmp_path / "rgb.npy")


def test_unlabelled_4d_asks_for_axes(tmp_path) -> None:
    np.save(tmp_path / "m.npy", movie((3, 2, 8, 8)))
    with pytest.raises(StackError, match=r"m\.npy: .*pass axes="):
        open_stack(tmp_path / "m.npy")
    np.save(tmp_path / "s.npy", movie((3, 1, 8, 8)))  # length-1 axes are no ambiguity
    assert open_stack(tmp_path / "s.npy").shape == (3, 8, 8)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"channel": 0}, "no C axis"),
        ({"z": 1}, "no Z axis"),
        ({"series": 3}, "series=3 out of range"),
        ({"key": "raw"}, "TIFF files take series="),
        ({"axes": "TYXC"}, "has 4 letters"),
    ],
)
def test_bad_selection_on_a_plain_stack(tmp_path, kwargs, problem) -> None:
    tifffile.imwrite(tmp_path / "m.tif", movie())
    with pytest.raises(StackError, match=problem):
        open_stack(tmp_path / "m.tif", **kwargs)


def test_selection_out_of_range(tmp_path) -> None:
    tifffile.imwrite(tmp_path / "h.tif", movie((3, 2, 8, 8)), imagej=True, metadata={"axes": "TCYX"})
    with pytest.raises(StackError, match="channel=2 out of range: axis C has 2 entries"):
        open_stack(tmp_path / "h.tif", channel=2)


def test_zarr_group_needs_a_key(tmp_path) -> None:
    group = zarr.open_group(tmp_path / "g.zarr", mode="w")
    group.create_array("a", shape=(2, 4, 4), dtype="uint16")
    group.create_array("b", shape=(2, 4, 4), dtype="uint16")
    with pytest.raises(StackError, match=r"g\.zarr: .*pass key="):
        open_stack(tmp_path / "g.zarr")
    with pytest.raises(StackError, match="no 'c' in this zarr group"):
        open_stack(tmp_path / "g.zarr", key="c")
    with pytest.raises(StackError, match="not a group"):
        open_stack(tmp_path / "g.zarr" / "a", key="x")


def test_series_only_where_there_are_series(tmp_path) -> None:
    np.save(tmp_path / "m.npy", movie((3, 8, 8)))
    zarr.create_array(tmp_path / "m.zarr", shape=(3, 8, 8), dtype="uint16")
    frames = tmp_path / "frames"  # a folder of frame files (infer --series on it was silently ignored)
    frames.mkdir()
    for t in range(3):
        tifffile.imwrite(frames / f"img_{t:03d}.tif", movie((1, 8, 8))[0])
    for path in (tmp_path / "m.npy", tmp_path / "m.zarr", frames):
        with pytest.raises(StackError, match="series=1 given"):
            open_stack(path, series=1)
    with open_stack(frames) as stack:
        assert stack.shape == (3, 8, 8)


def test_a_library_error_of_several_lines_is_said_in_one(tmp_path, monkeypatch) -> None:
    """A reader's error quotes the library's message, which can run over several lines (stack frames, quoted
    bytes): the error stays one line, its first."""
    path = tmp_path / "m.npy"
    np.save(path, np.zeros((2, 4, 4), np.uint16))

    def load(*args, **kwargs):
        raise ValueError("header is broken\n  File 'format.py', line 612\n    d = safe_eval(header_str)")

    monkeypatch.setattr(np, "load", load)
    with pytest.raises(StackError) as err:
        open_stack(path)
    assert "\n" not in str(err.value)
    assert str(err.value).endswith("unreadable .npy file (ValueError: header is broken)")


def test_a_failed_inputs_reason_is_one_line() -> None:
    from decode_mem.errors import failure_reason

    assert failure_reason(ValueError("cannot parse\n  row 7: 'x,,'")) == "ValueError: cannot parse"
    assert failure_reason(StackError("m.tif: empty file (0 bytes)")) == "m.tif: empty file (0 bytes)"
