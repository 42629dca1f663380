"""evaluate on decode_mem's own CSV: the camera pixel and the frame come from the summary of the infer run that
wrote it (``<stem>.json`` beside it), a given --pixel_size wins, --json is where the numbers go, and where nothing
records the pixel it is assessed all the same, in nm, with Picasso's NeNA (pairs within one camera pixel) n/a."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from decode_mem.evaluate.__main__ import main
from decode_mem.evaluate.no_truth import assess_file
from decode_mem.io.localizations import write_localizations
from decode_mem.io.table import EmitterTable
from decode_mem.link import INDEPENDENT

PX = 100.0
SIGMA_NM = 8.0


def draws(seed: int = 0, n_sites: int = 400, frames_on: int = 4) -> EmitterTable:
    """Sites in the upper-left 20 x 20 px of a 60 x 60 px frame, each on for a few frames, errors of SIGMA_NM."""
    rng = np.random.default_rng(seed)
    sx, sy = rng.uniform(1, 20, n_sites), rng.uniform(1, 20, n_sites)
    start = rng.integers(0, 500, n_sites)
    frame = (start[:, None] + np.arange(frames_on)[None, :]).ravel()
    err = rng.normal(0, SIGMA_NM / PX, (2, len(frame)))
    s = np.full(len(frame), SIGMA_NM / PX)
    return EmitterTable.from_arrays(frame=frame, x=np.repeat(sx, frames_on) + err[0],
                                    y=np.repeat(sy, frames_on) + err[1], photons=np.full(len(frame), 2000.0),
                                    sigma_x=s, sigma_y=s).sorted_by_frame()


@pytest.fixture
def own_csv(tmp_path: Path) -> Path:
    csv = tmp_path / "movie.csv"
    write_localizations(draws(), csv, pixel_size=PX)
    (tmp_path / "movie.json").write_text(json.dumps({"stem": "movie", "camera": {"pixel_size": PX},
                                                     "shape": [510, 60, 60]}))
    return csv


def test_no_truth_takes_the_pixel_and_the_frame_from_the_runs_summary(own_csv: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    r = assess_file(own_csv, correlation=INDEPENDENT, radius=60.0)
    frc = r.frc_molecules
    assert frc is not None
    side = 2 * (len(frc.curve) - 1) * frc.pixel  # the FRC images' side in nm: the camera's 60 px, not the extent
    assert side == pytest.approx(60 * PX, abs=2 * frc.pixel)
    # a given pixel size wins over the summary's: Picasso's NeNA window is one camera pixel
    finer = assess_file(own_csv, correlation=INDEPENDENT, radius=60.0, pixel_size=PX / 4)
    assert finer.nena_picasso.pairs < r.nena_picasso.pairs
    # the CLI: no --pixel_size needed, and --json is where the numbers go (no <stem>_quality.json then)
    out, q = tmp_path / "out", tmp_path / "q.json"
    assert main([str(own_csv), "--no_truth", "--correlation", "none", "--radius", "60", "--out", str(out),
                 "--json", str(q)]) == 0
    assert json.loads(q.read_text())["localizations"] == r.localizations
    assert sorted(p.name for p in out.iterdir()) == ["movie_quality.png"]


def test_without_a_summary_it_is_assessed_in_nm_and_picassos_nena_is_na(own_csv: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare" / "movie.csv"  # the same table without the run's summary (another tool's CSV)
    bare.parent.mkdir()
    bare.write_bytes(own_csv.read_bytes())
    q = tmp_path / "q.json"
    assert main([str(bare), "--no_truth", "--correlation", "none", "--radius", "60", "--out", str(tmp_path / "out"),
                 "--json", str(q)]) == 0
    got = json.loads(q.read_text())
    with_summary = assess_file(own_csv, correlation=INDEPENDENT, radius=60.0).as_dict()
    assert got["nena_picasso_nm"] is None and got["nena_picasso_pairs"] == 0 and with_summary["nena_picasso_nm"]
    # what needs no camera pixel is the same: the linking, the NeNA of linked localizations, the σ check
    for key in ("localizations", "molecules", "nena_nm", "sigma_check", "sigma_scale"):
        assert got[key] == pytest.approx(with_summary[key], rel=1e-3), key
