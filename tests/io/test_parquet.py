"""Parquet: the CSV's columns and units, metadata with the pixel size, row groups, atomic writes."""

from __future__ import annotations

import csv

import numpy as np
import pyarrow.parquet as pq
import pytest
from io_tables import random_table

from decode_mem.errors import StackError
from decode_mem.io.localizations import read_localizations
from decode_mem.io.parquet import ParquetWriter, parquet_meta, read_parquet, write_parquet
from decode_mem.io.table import EmitterTable
from decode_mem.io.thunderstorm import thunderstorm_columns, write_thunderstorm_csv

PX = 100.0


def table(n: int = 7, seed: int = 0, **extra) -> EmitterTable:
    return random_table(n, seed, **extra)


def test_parquet_holds_what_the_csv_holds(tmp_path) -> None:
    n = 7
    rng = np.random.default_rng(1)
    t = table(n, prob=rng.uniform(0, 1, n), sigma_x=rng.uniform(0.1, 0.5, n), sigma_y=rng.uniform(0.1, 0.5, n),
              sigma_photons=rng.uniform(10, 50, n))
    write_thunderstorm_csv(t, tmp_path / "l.csv", pixel_size=PX)
    write_parquet(t, tmp_path / "l.parquet", pixel_size=PX)

    with open(tmp_path / "l.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    raw = pq.read_table(tmp_path / "l.parquet").to_pydict()
    assert list(raw) == list(rows[0])  # same headers, same order
    for header in raw:
        np.testing.assert_allclose(raw[header], [float(r[header]) for r in rows], rtol=1e-5, err_msg=header)
    assert raw["frame"] == [f + 1 for f in t["frame"].tolist()]  # 1-based like the CSV
    np.testing.assert_allclose(raw["x [nm]"], (t["x"] + 0.5) * PX, rtol=1e-6)  # nm from the corner

    from_csv = read_localizations(tmp_path / "l.csv", pixel_size=PX)
    from_parquet = read_parquet(tmp_path / "l.parquet")
    assert from_parquet.names == from_csv.names
    for name in t.names:
        np.testing.assert_allclose(from_parquet[name], from_csv[name], rtol=1e-5, atol=1e-4, err_msg=name)
        np.testing.assert_allclose(from_parquet[name], t[name], rtol=1e-6, atol=1e-5, err_msg=name)


def test_metadata_records_the_pixel_size_and_frame(tmp_path) -> None:
    t = table(4)
    write_parquet(t, tmp_path / "l.parquet", pixel_size=PX, width=64, height=32)
    meta = parquet_meta(tmp_path / "l.parquet")
    assert (meta["pixel_size"], meta["width"], meta["height"]) == (PX, 64, 32)
    assert meta["frames"] == int(t["frame"].max()) + 1
    assert meta["generated_by"].startswith("decode_mem")
    # an explicit pixel size overrides the recorded one
    np.testing.assert_allclose(read_parquet(tmp_path / "l.parquet", pixel_size=2 * PX)["x"], (t["x"] + 0.5) / 2 - 0.5,
                               rtol=1e-6)


def test_writes_are_buffered_into_row_groups(tmp_path) -> None:
    parts = [table(5, seed=s) for s in range(5)]
    with ParquetWriter(tmp_path / "l.parquet", PX, row_group_rows=10) as w:
        for p in parts:
            w.write(p)
    pf = pq.ParquetFile(tmp_path / "l.parquet")
    assert [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)] == [10, 10, 5]
    assert pq.read_table(tmp_path / "l.parquet", columns=["id"])["id"].to_pylist() == list(range(1, 26))
    np.testing.assert_allclose(read_parquet(tmp_path / "l.parquet")["x"], EmitterTable.concat(parts)["x"], rtol=1e-6)


def test_row_groups_are_exact_whatever_the_write_sizes_and_values_are_the_columns(tmp_path) -> None:
    """Writes of 7 rows into groups of 10: groups of exactly 10, the rest at the end; every value is the
    float64 of ``thunderstorm_columns`` (what the CSV writer formats), unchanged by the encoding."""
    rng = np.random.default_rng(2)
    parts = [table(7, seed=s, prob=rng.uniform(0, 1, 7), sigma_x=rng.uniform(0.1, 0.5, 7),
                   sigma_y=rng.uniform(0.1, 0.5, 7)) for s in range(5)]
    extras = ("prob", "sigma_x", "sigma_y", "sigma_photons")  # sigma_photons absent: NaN
    with ParquetWriter(tmp_path / "l.parquet", PX, extras, row_group_rows=10) as w:
        for p in parts:
            w.write(p)
    pf = pq.ParquetFile(tmp_path / "l.parquet")
    assert [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)] == [10, 10, 10, 5]
    expected = thunderstorm_columns(EmitterTable.concat(parts), PX, extras)
    got = pq.read_table(tmp_path / "l.parquet")
    assert got.column_names == list(expected)
    for name, values in expected.items():
        np.testing.assert_array_equal(got[name].to_numpy(), values, err_msg=name)


def test_exception_leaves_no_file(tmp_path) -> None:
    with pytest.raises(RuntimeError), ParquetWriter(tmp_path / "l.parquet", PX) as w:
        w.write(table(3))
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_empty_table(tmp_path) -> None:
    write_parquet(EmitterTable.empty(), tmp_path / "e.parquet", pixel_size=PX)
    back = read_parquet(tmp_path / "e.parquet")
    assert len(back) == 0 and "frame" in back


def test_errors(tmp_path) -> None:
    with pytest.raises(StackError, match=r"nope\.parquet"):
        read_parquet(tmp_path / "nope.parquet")
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(StackError, match=r"bad\.parquet"):
        read_parquet(tmp_path / "bad.parquet")
    pq.write_table(pq.read_table(_foreign(tmp_path)), tmp_path / "foreign.parquet")
    in_nm = read_parquet(tmp_path / "foreign.parquet")  # no recorded pixel size, none given: read in 1 nm pixels
    np.testing.assert_array_equal(in_nm["x"], [49.5, 149.5, 249.5])
    assert len(read_parquet(tmp_path / "foreign.parquet", pixel_size=PX)) == 3


def _foreign(tmp_path):
    """A parquet with our columns but without decode_mem's metadata (e.g. written by pandas)."""
    import pyarrow as pa

    path = tmp_path / "src.parquet"
    pq.write_table(pa.table({"frame": [1, 2, 3], "x [nm]": [50.0, 150.0, 250.0], "y [nm]": [50.0, 50.0, 50.0]}), path)
    return path


def test_columns_are_read_as_pyarrow_gives_them_offset_and_nulls_included() -> None:
    """``_numpy``: a number column without nulls as a view of its buffer (at a slice's offset too), the same
    values and dtype as pyarrow's ``to_numpy``; a column with nulls or of another type through ``to_numpy``."""
    import pyarrow as pa

    from decode_mem.io.arrow_numpy import column_numpy as _numpy

    for values in (np.arange(10, dtype=np.int64), np.linspace(0, 1, 10), np.linspace(0, 1, 10).astype(np.float32),
                   np.arange(10, dtype=np.int32)):
        column = pa.array(values).slice(3, 5)
        got = _numpy(column)
        assert got.dtype == values.dtype and np.array_equal(got, values[3:8])
    with_null = pa.array([1.0, None, 3.0])
    np.testing.assert_array_equal(_numpy(with_null), with_null.to_numpy(zero_copy_only=False))
    text = pa.array(["a", "b"])
    assert list(_numpy(text)) == ["a", "b"]


def test_writing_and_reading_a_parquet_file_do_not_import_pandas(tmp_path) -> None:
    """pyarrow imports pandas the first time it converts to or from numpy (~1 s of CPU); every infer run writes its
    journal's parquet parts and a resumed run reads them, so neither may. The values written over numpy's buffers
    come back bit for bit (NaN included)."""
    import subprocess
    import sys

    t = table(50, prob=np.linspace(0, 1, 50))
    t["prob"][3] = np.nan
    path = tmp_path / "l.parquet"
    code = ("import sys, numpy as np; from decode_mem.io.parquet import write_parquet, read_parquet; "
            f"t = read_parquet({str(tmp_path / 'in.parquet')!r}); "
            f"write_parquet(t, {str(path)!r}, pixel_size={PX}); print(len(t), 'pandas' in sys.modules)")
    write_parquet(t, tmp_path / "in.parquet", pixel_size=PX)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["50", "False"]
    back = read_parquet(path)
    for name in ("frame", "x", "y", "photons", "prob"):
        np.testing.assert_array_equal(np.asarray(back[name]), np.asarray(read_parquet(tmp_path / "in.parquet")[name]),
                                      err_msg=name)


def test_floats_are_byte_stream_split_and_whole_numbers_delta_coded_exactly(tmp_path) -> None:
    """The writer's encodings (chosen for speed and size): every float column byte stream split, every whole-number
    column delta coded, and the values come back bit for bit, NaN and infinities included."""
    n = 5000
    rng = np.random.default_rng(3)
    sigma = rng.uniform(0.1, 0.5, n)
    sigma[[3, 17]] = [np.nan, np.inf]
    t = table(n, prob=rng.uniform(0, 1, n), sigma_x=sigma, sigma_y=rng.uniform(0.1, 0.5, n))
    write_parquet(t, tmp_path / "l.parquet", pixel_size=PX, row_group_rows=1024)
    meta = pq.ParquetFile(tmp_path / "l.parquet").metadata
    schema = pq.read_schema(tmp_path / "l.parquet")
    for i, field in enumerate(schema):
        expected = "DELTA_BINARY_PACKED" if field.type == "int64" else "BYTE_STREAM_SPLIT"
        for g in range(meta.num_row_groups):
            assert expected in meta.row_group(g).column(i).encodings, (field.name, g)
    raw = pq.read_table(tmp_path / "l.parquet").to_pydict()
    written = thunderstorm_columns(t, PX, ("prob", "sigma_x", "sigma_y"))
    for header, values in written.items():
        np.testing.assert_array_equal(np.asarray(raw[header]), values, err_msg=header)


def test_arrow_columns_over_numpy_buffers_lose_no_values() -> None:
    """``arrow_column``: numbers that fit the column's type go over their buffer, exactly; a float that a whole-number
    column would truncate is refused by pyarrow's own check, never cut silently."""
    import pyarrow as pa

    from decode_mem.io.arrow_numpy import arrow_column

    ints = np.array([1, 2, 2**40], np.int64)
    assert arrow_column(ints, pa.int64()).to_pylist() == [1, 2, 2**40]
    assert arrow_column(np.array([3, 4], np.int32), pa.int64()).to_pylist() == [3, 4]
    floats = np.array([0.1, np.nan, -np.inf], np.float32)
    back = np.asarray(arrow_column(floats, pa.float64()).to_pylist(), np.float64)
    np.testing.assert_array_equal(back, floats.astype(np.float64))
    with pytest.raises(pa.ArrowInvalid, match="truncated"):
        arrow_column(np.array([1.5]), pa.int64())
