"""A CSV records no acquisition; the summary of the infer run that wrote it (``<stem>.json`` beside it) does, and
``localization_meta`` reads it there for every job (evaluate, render, link, drift, the napari reader)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from decode_mem.io.localizations import LocalizationMeta, localization_meta, run_summary, write_localizations
from decode_mem.io.table import EmitterTable

PX = 110.0


def locs(n: int = 50, seed: int = 0) -> EmitterTable:
    rng = np.random.default_rng(seed)
    return EmitterTable.from_arrays(frame=np.sort(rng.integers(0, 20, n)), x=rng.uniform(0, 20, n),
                                    y=rng.uniform(0, 10, n), photons=rng.uniform(500, 5000, n))


def summary(folder: Path, stem: str, pixel_size: float = PX, shape: list[int] | None = None) -> Path:
    """What infer writes beside its files (the keys read here)."""
    path = folder / f"{stem}.json"
    path.write_text(json.dumps({"stem": stem, "camera": {"pixel_size": pixel_size, "kind": "emccd"},
                                "shape": shape or [40, 16, 24], "model_choice": {"path": "default_2d.pt"}}))
    return path


def test_a_csv_takes_pixel_frame_size_and_frames_from_its_runs_summary(tmp_path: Path) -> None:
    csv = tmp_path / "movie.csv"
    write_localizations(locs(), csv, pixel_size=PX)
    assert localization_meta(csv) == LocalizationMeta()  # nothing beside it: nothing recorded
    summary(tmp_path, "movie")
    assert localization_meta(csv) == LocalizationMeta(pixel_size=PX, width=24, height=16, frames=40)
    # a file made from it in the same folder (drift, link) takes the summary of the longest stem it starts with
    derived = tmp_path / "movie_undrift_link.csv"
    write_localizations(locs(), derived, pixel_size=PX)
    summary(tmp_path, "movie_undrift", pixel_size=65.0)
    assert localization_meta(derived).pixel_size == 65.0
    assert run_summary(tmp_path / "movie_undrift.csv")["camera"]["pixel_size"] == 65.0
    # another movie's summary whose stem is not the file's own nor a prefix joined by '_' is not taken
    other = tmp_path / "moviefast.csv"
    write_localizations(locs(), other, pixel_size=PX)
    assert localization_meta(other) == LocalizationMeta()


def test_an_unreadable_or_partial_summary_records_nothing_it_does_not_say(tmp_path: Path) -> None:
    csv = tmp_path / "movie.csv"
    write_localizations(locs(), csv, pixel_size=PX)
    (tmp_path / "movie.json").write_text("{not json")
    assert localization_meta(csv) == LocalizationMeta()
    (tmp_path / "movie.json").write_text(json.dumps({"camera": {"pixel_size": PX}, "shape": [40, 16]}))
    assert localization_meta(csv) == LocalizationMeta(pixel_size=PX)


def test_a_files_own_record_wins_over_the_summary(tmp_path: Path) -> None:
    pq = tmp_path / "movie.parquet"
    write_localizations(locs(), pq, pixel_size=100.0, width=24, height=16, frames=40)
    summary(tmp_path, "movie", pixel_size=PX, shape=[99, 99, 99])
    assert localization_meta(pq) == LocalizationMeta(pixel_size=100.0, width=24, height=16, frames=40)
