"""Blocks with temporal context, read-only mapping, > 4 GB files, laziness across processes."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import pickle
import stat
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
import tifffile
import zarr
from test_stack import NEEDS_IMAGECODECS, assert_blocks_match, movie

from decode_mem.io import open_stack


def write(tmp_path, data: np.ndarray, kind: str):
    """A memmapped TIFF (reads exactly the frames asked) or a zarr with 3 frames per chunk (carries chunks)."""
    if kind == "tiff":
        tifffile.imwrite(tmp_path / "m.tif", data)
        return tmp_path / "m.tif"
    zarr.create_array(tmp_path / "m.zarr", shape=data.shape, dtype=data.dtype, chunks=(3, *data.shape[1:]))[:] = data
    return tmp_path / "m.zarr"


@pytest.mark.parametrize("kind", ["tiff", "zarr-chunked"])
@pytest.mark.parametrize("n_frames", [1, 2, 5, 10])
@pytest.mark.parametrize("length", [1, 2, 3, 4, 64])
@pytest.mark.parametrize("context", [0, 1, 3])
def test_blocks_exact_neighbours_and_repeated_edges(tmp_path, kind, n_frames, length, context) -> None:
    data = movie((n_frames, 5, 6))
    with open_stack(write(tmp_path, data, kind)) as stack:
        assert_blocks_match(stack, data, length, context)


@pytest.mark.parametrize("kind", ["tiff", "zarr-chunked"])
def test_modifying_a_block_in_place_does_not_change_the_next(tmp_path, kind) -> None:
    data = movie((11, 5, 6))
    ref = np.pad(data, ((2, 2), (0, 0), (0, 0)), mode="edge")
    with open_stack(write(tmp_path, data, kind)) as stack:
        for t0, frames in stack.blocks(4, context=2):
            np.testing.assert_array_equal(frames, ref[t0: t0 + len(frames)])
            frames[:] = 0  # e.g. in-place normalization by the caller


def test_blocks_of_a_single_image_repeat_it(tmp_path) -> None:
    image = movie((9, 11))
    np.save(tmp_path / "one.npy", image)
    [(t0, frames)] = list(open_stack(tmp_path / "one.npy").blocks(16, context=1))
    assert t0 == 0 and frames.shape == (3, 9, 11)
    assert all((f == image).all() for f in frames)


@pytest.mark.parametrize(("length", "context"), [(0, 1), (4, -1)])
def test_blocks_reject_bad_arguments(tmp_path, length, context) -> None:
    np.save(tmp_path / "m.npy", movie((3, 4, 4)))
    with pytest.raises(ValueError, match="length"):
        next(open_stack(tmp_path / "m.npy").blocks(length, context=context))


def test_read_rejects_out_of_range(tmp_path) -> None:
    np.save(tmp_path / "m.npy", movie((3, 4, 4)))
    stack = open_stack(tmp_path / "m.npy")
    assert stack.read(1, 1).shape == (0, 4, 4)
    for t0, t1 in ((-1, 2), (2, 1), (0, 4)):
        with pytest.raises(IndexError):
            stack.read(t0, t1)


def test_memmap_is_read_only_and_never_writes_the_source(tmp_path) -> None:
    data = movie()
    path = tmp_path / "m.tif"
    tifffile.imwrite(path, data)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    os.chmod(path, stat.S_IRUSR | stat.S_IRGRP)  # read-only file (root bypasses this; the mode checks below don't)
    try:
        with open_stack(path) as stack:
            mapping = stack._src.array
            assert isinstance(mapping, np.memmap) and mapping.mode == "r" and not mapping.flags.writeable
            frames = stack[:]
            frames += 1  # the caller's copy is writable and independent of the file
            np.testing.assert_array_equal(stack[:], data)
    finally:
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_npy_mapping_is_read_only(tmp_path) -> None:
    np.save(tmp_path / "m.npy", movie())
    with open_stack(tmp_path / "m.npy") as stack:
        assert stack._src.array.mode == "r" and not stack._src.array.flags.writeable


@pytest.mark.filterwarnings("ignore:.*truncating ImageJ file:UserWarning")
def test_imagej_hyperstack_over_4_gb_is_mapped(tmp_path) -> None:
    """A > 4 GB ImageJ file has one IFD and the data after it; created sparse, so it costs no disk."""
    path = tmp_path / "huge.tif"
    shape = (2200, 1024, 1024)  # 4.3 GiB of uint16
    written = tifffile.memmap(path, shape=shape, dtype="uint16", imagej=True, metadata={"axes": "TYX"})
    written[0], written[1500, 5, 5], written[-1] = 3, 9, 7
    written.flush()
    del written
    with open_stack(path) as stack:
        assert stack.backend == "memmap" and stack.shape == shape
        assert stack[-1].min() == 7 and stack[1500, 5, 5] == 9 and stack[0].max() == 3
        tail = stack.read(shape[0] - 3, shape[0])  # data beyond 4 GB
        assert (tail[:2] == 0).all() and (tail[2] == 7).all()


def _last_frame_sum(stack) -> int:
    return int(stack[-1].sum(dtype=np.int64))


def test_pickled_stack_reopens_in_a_spawned_process(tmp_path) -> None:
    data = movie()
    tifffile.imwrite(tmp_path / "c.tif", data, compression="zlib")  # tifffile's zarr store does not pickle
    stack = open_stack(tmp_path / "c.tif")
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert pool.submit(_last_frame_sum, stack).result() == int(data[-1].sum(dtype=np.int64))


def _send_last_frame_sum(stack, results) -> None:
    total = _last_frame_sum(stack)
    results.put((stack._pid == os.getpid(), total))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
@NEEDS_IMAGECODECS
def test_forked_child_reopens_instead_of_sharing_the_file_handle(tmp_path) -> None:
    data = movie()
    tifffile.imwrite(tmp_path / "c.tif", data, compression="zstd")
    stack = open_stack(tmp_path / "c.tif")
    stack[0]  # the parent has the file open and has read from it
    fork = multiprocessing.get_context("fork")
    results = fork.Queue()
    child = fork.Process(target=_send_last_frame_sum, args=(stack, results))  # inherited, not pickled
    child.start()
    reopened, total = results.get(timeout=60)
    child.join()
    assert reopened and total == int(data[-1].sum(dtype=np.int64))
    np.testing.assert_array_equal(stack[-1], data[-1])


def test_unpickled_stack_keeps_its_selection(tmp_path) -> None:
    data = movie((4, 2, 8, 8))
    tifffile.imwrite(tmp_path / "h.tif", data, imagej=True, metadata={"axes": "TCYX"})
    clone = pickle.loads(pickle.dumps(open_stack(tmp_path / "h.tif", channel=1)))
    np.testing.assert_array_equal(clone[:], data[:, 1])
