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


def journaled(tmp_path, **kw) -> StackOutputs:
    return StackOutputs(tmp_path, "movie", ("csv", "parquet", "picasso"), pixel_size=100.0, shape=(50, 64, 64),
                        journal=True, block=10, journal_seconds=0, **kw)


def killed_after(tmp_path, blocks: list[EmitterTable], csv_tail: bytes | None = None) -> None:
    """A run whose journal closed a part per block, then ended by an error (as a kill leaves it). With
    ``csv_tail``, the CSV's temporary file stays as a SIGKILL leaves it, with ``csv_tail`` written after the last
    part closed (a block the kill cut)."""
    partial, left = tmp_path / "movie.csv.partial", None
    outs = journaled(tmp_path)
    outs.begin(False, {})
    with pytest.raises(RuntimeError), outs:
        for i, b in enumerate(blocks):
            outs.write(b, stop=10 * (i + 1))
        outs.keep_progress()
        if csv_tail is not None:
            with partial.open("ab") as fh:
                fh.write(csv_tail)
            left = partial.read_bytes()
        raise RuntimeError("killed")
    if left is not None:
        partial.write_bytes(left)  # an error removes the temporary files; a kill removes nothing


def test_a_resumed_run_replays_its_journal_in_the_writer_thread(tmp_path, monkeypatch) -> None:
    """``replay`` returns at once and the writer thread starts it only with the first new block (the network's
    first calls, torch.compile's tracing, run without it); ``write`` returns while it goes on; the replayed parts
    reach every file before the blocks written after them, and ``on_written`` sees every table, in frame order, in
    the writer thread (the report's image)."""
    from decode_mem.io import thunderstorm as csv_io

    before = [block(300, seed, first_frame=10 * seed) for seed in range(3)]
    killed_after(tmp_path, before)
    seen: list[tuple[str, int]] = []
    release, started = threading.Event(), threading.Event()
    real = csv_io.ThunderstormWriter.write

    def held(self, table: EmitterTable) -> None:  # the writer thread waits until the test lets it go
        started.set()
        release.wait(10)
        real(self, table)

    monkeypatch.setattr(csv_io.ThunderstormWriter, "write", held)
    outs = journaled(tmp_path, on_written=lambda t: seen.append((threading.current_thread().name,
                                                                 int(t["frame"].min()))))
    assert outs.begin(True, {}) == 30
    after = block(300, 3, first_frame=30)
    with outs:
        outs.replay()  # queued with the next block, not before
        assert not started.wait(0.3) and outs.n_localizations == 900
        outs.write(after, stop=40)  # returns with the writer thread held on the first replayed table
        assert started.wait(10) and seen == []
        release.set()
    whole = EmitterTable.concat([*before, after])
    assert outs.n_localizations == len(whole)
    assert [name for name, _ in seen] == [THREAD_NAME] * 4
    assert [first for _, first in seen] == sorted(first for _, first in seen)
    for name in ("movie.csv", "movie.parquet", "movie.hdf5"):
        back = read_localizations(tmp_path / name, pixel_size=100.0)
        np.testing.assert_array_equal(back["frame"], whole["frame"])
        np.testing.assert_allclose(back["x"], whole["x"], atol=1e-3)


def test_a_stop_cuts_a_replay_short_and_keeps_the_journal(tmp_path, monkeypatch) -> None:
    """A stop during the replay need not wait for it (the files are discarded at a stop): the writer thread
    leaves the replay at the next table, and the journal keeps every part for the next ``--resume``."""
    from decode_mem.io import thunderstorm as csv_io

    killed_after(tmp_path, [block(200, seed, first_frame=10 * seed) for seed in range(4)])
    written: list[int] = []
    real = csv_io.ThunderstormWriter.write
    gate = threading.Event()

    def slow(self, table: EmitterTable) -> None:
        gate.wait(10)
        written.append(len(table))
        real(self, table)

    monkeypatch.setattr(csv_io.ThunderstormWriter, "write", slow)
    outs = journaled(tmp_path)
    outs.begin(True, {})
    with pytest.raises(KeyboardInterrupt), outs:
        outs.replay()
        outs.write(block(200, 4, first_frame=40), stop=50)  # the replay starts, then this block is journaled
        threading.Timer(0.2, gate.set).start()
        assert outs.keep_progress() == 50
        raise KeyboardInterrupt
    assert len(written) < 5  # the first replayed table, maybe one more, and the new block: not the whole journal
    assert [p.name for p in tmp_path.iterdir()] == ["movie.progress"]
    again = journaled(tmp_path)
    assert again.begin(True, {}) == 50 and len(again.journal.parts) == 5


def test_a_resume_with_no_frame_left_replays_at_the_end(tmp_path) -> None:
    """Killed after its journal covered every frame (before ``<stem>.json``): the resumed run computes nothing,
    and leaving the ``with`` block writes the journal to every file."""
    before = [block(300, seed, first_frame=10 * seed) for seed in range(5)]
    killed_after(tmp_path, before)
    outs = journaled(tmp_path)
    assert outs.begin(True, {}) == 50
    with outs:
        outs.replay()
    whole = EmitterTable.concat(before)
    assert outs.n_localizations == len(whole)
    for name in ("movie.csv", "movie.parquet", "movie.hdf5"):
        back = read_localizations(tmp_path / name, pixel_size=100.0)
        np.testing.assert_array_equal(back["frame"], whole["frame"])


@pytest.mark.parametrize("shorten", [False, True])
def test_a_resumed_run_continues_the_csv_a_kill_left(tmp_path, shorten) -> None:
    """The CSV is cut back to the length its last part recorded and appended to (not rebuilt); a file shorter
    than that (lost with the page cache) is rebuilt from the journal. Either way every file equals one run's."""
    blocks = [block(300, seed, first_frame=10 * seed) for seed in range(4)]
    whole_dir = tmp_path / "whole"
    with journaled(whole_dir) as outs:
        for i, b in enumerate(blocks):
            outs.write(b, stop=10 * (i + 1))
    killed_after(tmp_path, blocks[:3], csv_tail=b"901,31,123.4")
    if shorten:
        partial = tmp_path / "movie.csv.partial"
        partial.write_bytes(partial.read_bytes()[:1000])
    outs = journaled(tmp_path)
    assert outs.begin(True, {}) == 30
    with outs:
        outs.replay()
        outs.write(blocks[3], stop=40)
    continued = [] if shorten else ["movie.csv"]
    assert outs.resume_files["continued"] == continued
    assert (tmp_path / "movie.csv").read_bytes() == (whole_dir / "movie.csv").read_bytes()
    for name in ("movie.parquet", "movie.hdf5"):
        back = read_localizations(tmp_path / name, pixel_size=100.0)
        np.testing.assert_array_equal(back["x"], read_localizations(whole_dir / name, pixel_size=100.0)["x"])
