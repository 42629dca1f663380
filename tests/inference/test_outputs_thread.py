"""StackOutputs writes through a writer thread: every block reaches every file, and a writer failing in
that thread (or an exception in the loop) leaves no file of the stack, final or partial."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from decode_mem.infer.outputs import StackOutputs
from decode_mem.io.localizations import read_localizations
from decode_mem.io.table import EmitterTable
from decode_mem.io.write_behind import THREAD_NAME


def block(n: int, seed: int, first_frame: int = 0, frames: int = 10) -> EmitterTable:
    rng = np.random.default_rng(seed)
    return EmitterTable.from_arrays(
        frame=np.sort(rng.integers(first_frame, first_frame + frames, n)), x=rng.uniform(0, 63, n),
        y=rng.uniform(0, 63, n), photons=rng.uniform(500, 5000, n), bg=rng.uniform(5, 50, n),
        prob=rng.uniform(0.4, 1, n), sigma_x=rng.uniform(0.05, 0.3, n), sigma_y=rng.uniform(0.05, 0.3, n),
        sigma_photons=rng.uniform(10, 100, n))


def outputs(tmp_path) -> StackOutputs:
    return StackOutputs(tmp_path, "movie", ("csv", "parquet", "picasso"), pixel_size=100.0, shape=(50, 64, 64))


def test_every_block_reaches_every_file(tmp_path) -> None:
    blocks = [block(400, seed, first_frame=10 * seed) for seed in range(3)]
    with outputs(tmp_path) as outs:
        for b in blocks:
            outs.write(b)
    whole = EmitterTable.concat(blocks)
    assert outs.n_localizations == len(whole)
    for name in ("movie.csv", "movie.parquet", "movie.hdf5"):
        back = read_localizations(tmp_path / name, pixel_size=100.0)
        np.testing.assert_array_equal(back["frame"], whole["frame"])
        np.testing.assert_allclose(back["x"], whole["x"], atol=1e-3)


def test_a_writer_failing_in_its_thread_leaves_no_file(tmp_path, monkeypatch) -> None:
    from decode_mem.io import parquet

    calls = []

    def broken(self, table: EmitterTable) -> None:
        calls.append(threading.current_thread().name)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(parquet.ParquetWriter, "write", broken)
    with pytest.raises(OSError, match="Input/output"), outputs(tmp_path) as outs:
        for i in range(20):
            outs.write(block(100, i, first_frame=i, frames=1))
    assert calls and set(calls) == {THREAD_NAME}
    assert list(tmp_path.iterdir()) == []  # no final file, no partial one


def test_an_exception_in_the_loop_leaves_no_file(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="device"), outputs(tmp_path) as outs:
        outs.write(block(100, 0))
        raise RuntimeError("device lost")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="outside its with block"):
        outs.write(block(1, 0, first_frame=20))
