"""An FRC is stated as a resolution only where it is one (``evaluate.no_truth.frc_withheld``): simulated rings, grids
and filaments get one; uniformly scattered emitters, too few molecules, a curve that never crosses 1/7, a crossing
coarser than the diffraction limit and a dense movie get a reason in words instead, on the console and in the
report, while the JSON keeps the raw value beside the reason."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from decode_mem.evaluate.__main__ import main
from decode_mem.evaluate.no_truth import (
    DIFFRACTION_LIMIT,
    FIELD_RINGS,
    MIN_FRC_MOLECULES,
    Frc,
    assess_file,
    frc_withheld,
    quality_line,
    quality_rows,
)
from decode_mem.io.localizations import write_localizations
from decode_mem.io.table import EmitterTable
from decode_mem.link import INDEPENDENT

PX = 100.0
SIZE = 64  # px
SIGMA_NM = 10.0


def simulated(structure: dict, frames: int, seed: int = 0) -> EmitterTable:
    """The true positions of a simulated movie's emitters (``decode_mem.simulate``, no image made), each moved by an
    error of SIGMA_NM per axis that its σ states; those inside the camera frame."""
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.movie import MovieSimulator, rows_to_table

    cfg = SimulationConfig(frame_size=(SIZE, SIZE), structure=structure)
    sim = MovieSimulator(cfg, seed)
    _, rows = sim.process.rows(0, frames)
    gt = rows_to_table(cfg, rows, sim.bg, None, 0)
    rng = np.random.default_rng(seed)
    n = len(gt)
    s = np.full(n, SIGMA_NM / PX)
    t = EmitterTable.from_arrays(frame=gt["frame"], x=gt["x"] + rng.normal(0, SIGMA_NM / PX, n),
                                 y=gt["y"] + rng.normal(0, SIGMA_NM / PX, n), photons=gt["photons"], sigma_x=s,
                                 sigma_y=s)
    inside = (t["x"] > -0.5) & (t["x"] < SIZE - 0.5) & (t["y"] > -0.5) & (t["y"] < SIZE - 0.5)
    return t.select(inside).sorted_by_frame()


def assessed(tmp_path: Path, table: EmitterTable, name: str):
    path = tmp_path / f"{name}.parquet"
    write_localizations(table, path, pixel_size=PX, width=SIZE, height=SIZE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # crowding warnings: not what is tested here
        return path, assess_file(path, correlation=INDEPENDENT, radius=60.0)


@pytest.mark.parametrize(("structure", "frames"), [({"kind": "rings"}, 1000), ({"kind": "grids"}, 1000),
                                                   ({"kind": "filaments", "filament_spacing": 20.0}, 1000)])
def test_simulated_structures_get_a_resolution(tmp_path: Path, structure: dict, frames: int) -> None:
    _, r = assessed(tmp_path, simulated(structure, frames), structure["kind"])
    frc = r.frc_molecules
    assert frc is not None and frc.withheld is None, frc.withheld
    assert 2 * SIGMA_NM < frc.resolution < 100.0 and frc.stated == frc.resolution
    assert f"FRC resolution {frc.resolution:.2f} nm" in quality_line(r.as_dict())


def test_uniformly_scattered_emitters_get_no_resolution_but_the_reason(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path, r = assessed(tmp_path, simulated({"kind": "none"}, 300), "uniform")
    frc = r.frc_molecules
    assert r.molecules > 4 * MIN_FRC_MOLECULES  # not a matter of too few
    assert frc.resolution > DIFFRACTION_LIMIT and frc.stated is None
    assert "field's outline" in frc.withheld and "no structure" in frc.withheld
    # the console carries the reason, not the number; the JSON the raw number and the reason; the report the reason
    assert main([str(path), "--no_truth", "--correlation", "none", "--radius", "60", "--out", str(tmp_path)]) == 0
    line = capsys.readouterr().out
    assert "no FRC resolution: the FRC falls below 1/7" in line and "FRC resolution" not in line.replace(
        "no FRC resolution", "")
    d = json.loads((tmp_path / "uniform_quality.json").read_text())["frc_molecule_split"]
    assert d["resolution_nm"] == pytest.approx(frc.resolution, abs=1e-3) and d["withheld"] == frc.withheld
    rows = dict(quality_rows(r.as_dict()))
    assert rows[f"FRC resolution, halves by {frc.split}"] == f"not a resolution: {frc.withheld}"


def test_a_few_molecules_get_no_resolution(tmp_path: Path) -> None:
    _, r = assessed(tmp_path, simulated({"kind": "rings"}, 150), "few")
    assert r.molecules < 2 * MIN_FRC_MOLECULES
    assert r.frc_molecules.withheld.startswith("too few molecules for an FRC")


def curve_crossing_at(resolution: float, side_nm: float = 40_000.0, pixel: float = 5.0) -> Frc:
    """A hand-made FRC of a field ``side_nm`` wide: 1 up to 1/``resolution``, 0 beyond."""
    n = int(side_nm / pixel)
    freq = np.arange(n // 2 + 1) / (n * pixel)
    curve = np.where(freq < 1 / resolution, 1.0, 0.0)
    from decode_mem.evaluate.no_truth import frc_resolution, smoothed

    return Frc(freq, curve, frc_resolution(freq, smoothed(curve)), "molecules", pixel)


def test_the_criteria_on_hand_made_curves() -> None:
    enough = (MIN_FRC_MOLECULES, MIN_FRC_MOLECULES)
    fine = curve_crossing_at(60.0)
    assert fine.resolution == pytest.approx(60.0, rel=0.05) and frc_withheld(fine, enough) is None
    assert "dense" in frc_withheld(fine, enough, dense=True)
    assert frc_withheld(fine, (MIN_FRC_MOLECULES - 1, 500)).startswith("too few molecules")
    coarse = curve_crossing_at(1000.0)  # on ring 40 of a 40 µm field: past the outline's rings
    assert 1 / coarse.resolution > coarse.frequency[FIELD_RINGS]
    assert "diffraction limit" in frc_withheld(coarse, enough)
    outline = curve_crossing_at(8000.0)  # on ring 5
    assert "field's outline" in frc_withheld(outline, enough)
    never = Frc(fine.frequency, np.full(len(fine.frequency), 0.05), None, "molecules", 5.0)
    assert "never agree" in frc_withheld(never, enough)
    always = Frc(fine.frequency, np.ones(len(fine.frequency)), None, "molecules", 5.0)
    assert "finest scale" in frc_withheld(always, enough)
