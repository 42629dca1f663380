"""One dispatch for localization files: format by suffix, same table back from every format."""

from __future__ import annotations

import numpy as np
import pytest

from decode_mem.errors import ConfigError, StackError
from decode_mem.io.localizations import (
    LocalizationMeta,
    iter_localizations,
    localization_meta,
    open_writer,
    read_localizations,
    write_localizations,
)
from decode_mem.io.table import EmitterTable
from decode_mem.io.thunderstorm import write_thunderstorm_csv

PX = 100.0
MAGIC = {".csv": b'"id"', ".hdf5": b"\x89HDF", ".h5": b"\x89HDF", ".parquet": b"PAR1", ".pq": b"PAR1"}


def table(n: int = 9, seed: int = 0) -> EmitterTable:
    rng = np.random.default_rng(seed)
    return EmitterTable.from_arrays(
        frame=rng.integers(0, 20, n), x=rng.uniform(0, 31, n), y=rng.uniform(0, 15, n), z=np.zeros(n),
        photons=rng.uniform(500, 5000, n), bg=rng.uniform(5, 50, n), prob=rng.uniform(0.5, 1, n),
        sigma_x=rng.uniform(0.05, 0.3, n), sigma_y=rng.uniform(0.05, 0.3, n))


@pytest.mark.parametrize("suffix", list(MAGIC))
def test_format_follows_the_suffix_and_reads_back(tmp_path, suffix) -> None:
    t = table()
    path = tmp_path / f"locs{suffix}"
    write_localizations(t, path, pixel_size=PX, width=32, height=16, frames=20)
    assert path.read_bytes()[:4] == MAGIC[suffix]
    back = read_localizations(path, pixel_size=PX)
    assert set(back.names) == set(t.names)
    for name in t.names:
        np.testing.assert_allclose(back[name], t[name], rtol=1e-5, atol=1e-4, err_msg=f"{suffix} {name}")
    assert not list(tmp_path.glob("*.partial"))


def test_metadata_per_format(tmp_path) -> None:
    for suffix in (".csv", ".hdf5", ".parquet"):
        write_localizations(table(), tmp_path / f"l{suffix}", pixel_size=PX, width=32, height=16, frames=20)
    assert localization_meta(tmp_path / "l.csv") == LocalizationMeta()
    expected = LocalizationMeta(pixel_size=PX, width=32, height=16, frames=20)
    assert localization_meta(tmp_path / "l.hdf5") == expected
    assert localization_meta(tmp_path / "l.parquet") == expected
    # parquet and Picasso do not need to be told the pixel size
    assert len(read_localizations(tmp_path / "l.parquet")) == len(read_localizations(tmp_path / "l.hdf5")) == 9


def test_streaming_csv_reader_returns_the_written_table_across_blocks(tmp_path) -> None:
    t = table(3000, seed=4)  # > 64 KiB of text: several pyarrow blocks
    write_thunderstorm_csv(t, tmp_path / "l.csv", pixel_size=PX)
    chunks = list(iter_localizations(tmp_path / "l.csv", pixel_size=PX, chunk_rows=500))
    assert len(chunks) > 1
    streamed = EmitterTable.concat(chunks)
    assert set(t.names) <= set(streamed.names)
    for name in t.names:  # written with finite decimals: equal to the written values up to that rounding
        np.testing.assert_allclose(streamed[name], t[name], rtol=1e-5, atol=1e-4, err_msg=name)


def test_picasso_is_read_in_chunks(tmp_path) -> None:
    write_localizations(table(25), tmp_path / "l.hdf5", pixel_size=PX, width=32, height=16)
    assert [len(c) for c in iter_localizations(tmp_path / "l.hdf5", chunk_rows=10)] == [10, 10, 5]


def test_open_writer_streams(tmp_path) -> None:
    parts = [table(4, seed=s) for s in range(3)]
    with open_writer(tmp_path / "l.parquet", pixel_size=PX, extras=("prob",)) as w:
        for p in parts:
            w.write(p)
    back = read_localizations(tmp_path / "l.parquet")
    assert "prob" in back and "sigma_x" not in back
    np.testing.assert_allclose(back["prob"], EmitterTable.concat(parts)["prob"], rtol=1e-6)


def test_user_errors(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"\.txt"):
        write_localizations(table(), tmp_path / "l.txt", pixel_size=PX)
    with pytest.raises(ConfigError, match="width and height"):
        open_writer(tmp_path / "l.hdf5", pixel_size=PX)
    with pytest.raises(ConfigError, match="extra"):
        open_writer(tmp_path / "l.csv", pixel_size=PX, extras=("nonsense",))
    with pytest.raises(StackError, match=r"missing\.parquet"):
        read_localizations(tmp_path / "missing.parquet")
    write_localizations(table(), tmp_path / "l.csv", pixel_size=PX)
    in_nm = read_localizations(tmp_path / "l.csv")  # no camera pixel recorded: read in 1 nm pixels, not an error
    np.testing.assert_allclose(in_nm["x"], (table()["x"] + 0.5) * PX - 0.5, atol=1e-3)
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(StackError, match=r"x\.csv"):
        read_localizations(tmp_path / "x.csv", pixel_size=PX)
