"""Localization tables from anywhere: rows with a non-finite or out-of-range frame, coordinate, photon count or
background are left out of every format's tables with one warning that counts them (``io.table.RowCheck``), never
carried into linking, drift or rendering; a file whose own metadata are nonsense is refused in one line."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import yaml

from decode_mem.errors import StackError
from decode_mem.io.localizations import iter_localizations, localization_meta, read_localizations, write_localizations
from decode_mem.io.table import EmitterTable

PX = 100.0


def table(n: int = 60) -> EmitterTable:
    rng = np.random.default_rng(7)
    return EmitterTable.from_arrays(frame=rng.integers(0, 20, n), x=rng.uniform(0, 31, n), y=rng.uniform(0, 31, n),
                                    z=rng.uniform(-200, 200, n), photons=rng.uniform(500, 5000, n),
                                    bg=rng.uniform(5, 50, n))


def read_warned(path, **kw) -> tuple[EmitterTable, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = EmitterTable.concat(iter_localizations(path, chunk_rows=16, **kw))
    return got, [str(w.message) for w in caught if "localizations left out" in str(w.message)]


def edit_cells(path, edits: dict[tuple[int, str], str]) -> None:
    lines = path.read_text().split("\n")
    header = [h.strip('"') for h in lines[0].split(",")]
    for (row, column), value in edits.items():
        cells = lines[row + 1].split(",")
        cells[header.index(column)] = value
        lines[row + 1] = ",".join(cells)
    path.write_text("\n".join(lines))


def test_csv_cells_no_job_can_use_leave_their_rows_out_with_one_warning(tmp_path):
    t = table()
    path = tmp_path / "locs.csv"
    write_localizations(t, path, pixel_size=PX)
    bad = {(3, "x [nm]"): "nan", (7, "intensity [photon]"): "inf", (11, "frame"): "0", (15, "y [nm]"): "1e20",
           (19, "intensity [photon]"): "-5", (23, "frame"): "nan", (27, "z [nm]"): "-inf",
           (31, "offset [photon]"): "nan"}
    edit_cells(path, bad)
    got, said = read_warned(path, pixel_size=PX)
    kept = np.setdiff1d(np.arange(len(t)), [row for row, _ in bad])
    assert len(got) == len(kept)
    np.testing.assert_allclose(got["x"], t["x"][kept], atol=1e-5)
    assert said == [f"{path}: 8 of 60 localizations left out (frame not a frame of the movie: 2, x not finite or "
                    "outside the image: 1, y not finite or outside the image: 1, z not finite: 1, background not "
                    "finite: 1, photons not finite or negative: 2)"]


def test_a_clean_file_reads_without_a_warning_and_spots_just_beyond_the_edge_stay(tmp_path):
    t = table()
    x = t["x"].copy()
    x[0], x[1] = -3.0, 33.5  # a simulation's margin (3 px), a fit at the image's edge
    t = EmitterTable({**t.columns, "x": x})
    path = tmp_path / "locs.hdf5"
    write_localizations(t, path, pixel_size=PX, width=32, height=32, frames=20)
    got, said = read_warned(path, pixel_size=PX)
    assert said == [] and len(got) == len(t)


def test_rows_beyond_the_recorded_image_and_frames_are_left_out(tmp_path):
    t = table()
    x, frame = t["x"].copy(), t["frame"].copy()
    x[:3] = [-40.0, 70.0, 5e9]  # beyond a 32-px image by more than its width: another unit, a corrupt value
    frame[3:5] = [20, 10**6]  # a file of 20 frames
    path = tmp_path / "locs.parquet"
    write_localizations(EmitterTable({**t.columns, "x": x, "frame": frame}), path, pixel_size=PX, width=32,
                        height=32, frames=20)
    got, said = read_warned(path, pixel_size=PX)
    assert len(got) == len(t) - 5
    assert "5 of 60 localizations left out (frame not a frame of the movie: 2, x not finite or outside the image: 3)" \
        in said[0]


@pytest.mark.parametrize("key, value", [("Frames", []), ("Pixelsize", {}), ("Width", ""), ("Height", -32),
                                        ("Frames", float("inf")), ("Pixelsize", -100.0), ("Frames", 2.5)])
def test_a_picasso_file_whose_metadata_are_nonsense_is_one_line(tmp_path, key, value):
    path = tmp_path / "locs.hdf5"
    write_localizations(table(), path, pixel_size=PX, width=32, height=32, frames=20)
    docs = list(yaml.safe_load_all(path.with_suffix(".yaml").read_text()))
    docs[-1][key] = value
    path.with_suffix(".yaml").write_text(yaml.safe_dump_all(docs))
    with pytest.raises(StackError) as err:
        localization_meta(path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)
    with pytest.raises(StackError):
        read_localizations(path)


def test_zero_frames_recorded_are_frames_not_recorded(tmp_path):
    """An empty table's parquet records 0 frames, Picasso's 'Frames: 0' means missing: neither is a frame count."""
    path = tmp_path / "locs.hdf5"
    write_localizations(table(), path, pixel_size=PX, width=32, height=32, frames=20)
    docs = list(yaml.safe_load_all(path.with_suffix(".yaml").read_text()))
    for doc in docs:
        doc["Frames"] = 0
    path.with_suffix(".yaml").write_text(yaml.safe_dump_all(docs))
    assert localization_meta(path).frames is None
    assert len(read_localizations(path)) == 60
