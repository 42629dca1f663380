"""Every job that reads localizations reads every table format (issue 74): link, drift, render, evaluate
--no_truth and napari's reader give the same results on the same localizations written as ThunderSTORM CSV,
parquet, Picasso, DECODE, SMAP, ShareLoc and rapidSTORM; a ThunderSTORM CSV that another tool wrote (no camera
pixel, no summary beside it) needs no --pixel_size for any of them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from decode_mem.drift import correct_file
from decode_mem.evaluate.no_truth import assess_file
from decode_mem.io.localizations import read_localizations, write_localizations
from decode_mem.io.table import EmitterTable
from decode_mem.link import INDEPENDENT, link_file
from decode_mem.napari.reader import get_reader
from decode_mem.render.image import render_file

PX = 120.0  # nm
SIDE = 64  # px
FRAMES = 1500
SUFFIXES = {"csv": ".csv", "parquet": ".parquet", "picasso": ".hdf5", "decode": ".h5", "smap": "_sml.mat",
            "smlm": ".smlm", "rapidstorm": ".txt"}
pytestmark = pytest.mark.filterwarnings("ignore:.*crowded for linking")  # the rings are dense on purpose


def blinking_rings(seed: int = 0) -> EmitterTable:
    """Sites on rings of 60 nm radius blinking over FRAMES frames (each on for a few frames at a time), 6 nm
    localization errors, a slow drift of about 40 nm: structure enough for the drift and the FRC."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(6, SIDE - 6, (120, 2))
    angle = rng.uniform(0, 2 * np.pi, (120, 8))
    sites = (centres[:, None, :] + 0.5 * np.stack([np.cos(angle), np.sin(angle)], -1)).reshape(-1, 2)
    frames, xy = [], []
    for site in sites:
        for start in rng.integers(0, FRAMES - 4, 3):
            on = np.arange(start, start + rng.integers(1, 4))
            frames.append(on)
            xy.append(np.repeat(site[None], len(on), 0))
    frame = np.concatenate(frames)
    xy = np.concatenate(xy) + rng.normal(0, 6.0 / PX, (len(frame), 2))
    drift = np.stack([np.sin(frame / FRAMES * 2), frame / FRAMES], -1) * (40.0 / PX)
    xy = xy + drift
    n = len(frame)
    s = np.full(n, 6.0 / PX)
    return EmitterTable.from_arrays(frame=frame, x=xy[:, 0], y=xy[:, 1], photons=rng.uniform(800, 4000, n),
                                    bg=rng.uniform(5, 20, n), sigma_x=s, sigma_y=s,
                                    prob=rng.uniform(0.5, 1, n)).sorted_by_frame()


def rapidstorm_text(t: EmitterTable) -> str:
    """The table as rapidSTORM writes one: an XML header naming the columns, nm, frames from 0."""
    fields = [("Position-0-0", "nanometer"), ("Position-1-0", "nanometer"), ("ImageNumber-0-0", "frame"),
              ("Amplitude-0-0", "A/D count"), ("LocalBackground-0-0", "A/D count"),
              ("Position-0-0-uncertainty", "nanometer"), ("Position-1-0-uncertainty", "nanometer")]
    head = "# <localizations insequence=\"true\" repetitions=\"variable\">" + "".join(
        f'<field identifier="{i}" syntax="floating point" semantic="" unit="{u}" />' for i, u in fields)
    rows = np.column_stack([(t["x"].astype(np.float64) + 0.5) * PX, (t["y"].astype(np.float64) + 0.5) * PX,
                            t["frame"], t["photons"], t["bg"], t["sigma_x"].astype(np.float64) * PX,
                            t["sigma_y"].astype(np.float64) * PX])
    body = "\n".join(" ".join(f"{v:.6f}" if k != 2 else str(int(v)) for k, v in enumerate(r)) for r in rows)
    return f"{head}</localizations>\n{body}\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    t = blinking_rings()
    out: dict[str, Path] = {}
    for fmt, suffix in SUFFIXES.items():
        folder = tmp_path_factory.mktemp(fmt)  # one folder each: no infer summary beside any of them
        path = folder / f"rings{suffix}"
        if fmt == "rapidstorm":
            path.write_text(rapidstorm_text(t))
        elif fmt == "csv":  # as another tool writes it: no camera pixel, no frame size
            write_localizations(t, path, pixel_size=PX)
        else:
            write_localizations(t, path, pixel_size=PX, width=SIDE, height=SIDE, frames=FRAMES)
        out[fmt] = path
    return out


def test_every_format_reads_the_same_localizations(files: dict[str, Path]) -> None:
    ref = read_localizations(files["parquet"], pixel_size=PX)
    for fmt, path in files.items():
        t = read_localizations(path, pixel_size=PX)
        assert np.array_equal(t["frame"], ref["frame"]), fmt
        np.testing.assert_allclose(t["x"], ref["x"], atol=1e-5, err_msg=fmt)


def test_link_gives_the_same_molecules_from_every_format(files: dict[str, Path], tmp_path: Path) -> None:
    results = {fmt: link_file(path, tmp_path / fmt, radius=40.0, correlation=INDEPENDENT)
               for fmt, path in files.items()}
    counts = {fmt: (r.localizations, r.molecules) for fmt, r in results.items()}
    assert len(set(counts.values())) == 1, counts
    for fmt, r in results.items():  # written in the input's format (rapidSTORM's as ThunderSTORM CSV)
        expected = ".csv" if fmt == "rapidstorm" else Path(SUFFIXES[fmt]).suffix
        assert r.molecules_path.name.endswith(expected) and r.molecules_path.is_file()
        mols = read_localizations(r.molecules_path, pixel_size=PX)
        assert len(mols) == r.molecules
    ref = read_localizations(results["parquet"].molecules_path, pixel_size=PX)
    for fmt, r in results.items():
        mols = read_localizations(r.molecules_path, pixel_size=PX)
        order, ref_order = np.lexsort((mols["x"], mols["frame"])), np.lexsort((ref["x"], ref["frame"]))
        np.testing.assert_allclose(mols["x"][order], ref["x"][ref_order], atol=1e-3, err_msg=fmt)


def test_drift_gives_the_same_estimate_from_every_format(files: dict[str, Path], tmp_path: Path) -> None:
    estimates = {fmt: correct_file(path, tmp_path / fmt) for fmt, path in files.items()}
    ref = estimates["parquet"].estimate.dxdy
    assert np.ptp(ref, axis=0).max() > 20  # a drift was found
    for fmt, res in estimates.items():  # to the last frame recorded, or with a localization (CSV, rapidSTORM)
        k = min(len(ref), len(res.estimate.dxdy))
        assert k >= FRAMES - 5
        np.testing.assert_allclose(res.estimate.dxdy[:k], ref[:k], atol=0.05, err_msg=fmt)
        back = read_localizations(res.corrected, pixel_size=PX)
        assert len(back) == res.localizations and res.corrected.is_file()


def test_render_draws_every_format(files: dict[str, Path], tmp_path: Path) -> None:
    images = {fmt: render_file(path, tmp_path / f"{fmt}.png", render_pixel=30.0, zoom=None)
              for fmt, path in files.items()}
    ref = images["parquet"]
    for fmt, r in images.items():
        if fmt in ("csv", "rapidstorm"):  # no frame size recorded: the localizations' extent, in nm (a Gaussian's
            # tail beyond the outermost localization falls outside it)
            assert r.n == ref.n and abs(r.image.sum() - ref.image.sum()) < 5e-3 * ref.image.sum(), fmt
        else:  # the camera's field from the file: the same image
            assert r.image.shape == ref.image.shape == (SIDE * PX / 30,) * 2
            np.testing.assert_allclose(r.image, ref.image, atol=1e-3 * float(ref.image.max()), err_msg=fmt)


def test_evaluate_without_truth_assesses_every_format(files: dict[str, Path]) -> None:
    results = {fmt: assess_file(path, correlation=INDEPENDENT, radius=40.0).as_dict() for fmt, path in files.items()}
    ref = results["parquet"]
    assert ref["nena_picasso_nm"] is not None
    for fmt, d in results.items():
        for key in ("localizations", "molecules", "nena_nm", "sigma_check"):
            assert d[key] == pytest.approx(ref[key], rel=1e-3), (fmt, key)
        # Picasso's NeNA counts pairs within one camera pixel: n/a where the file records no camera pixel
        assert (d["nena_picasso_nm"] is None) == (fmt in ("csv", "rapidstorm")), fmt


def test_evaluate_against_truth_in_another_format(files: dict[str, Path]) -> None:
    """Predictions in any format against ground truth in any other: the same localizations match one to one."""
    from decode_mem.evaluate import evaluate_files

    for fmt, path in files.items():
        truth = files["csv" if fmt != "csv" else "smap"]
        m = evaluate_files(path, truth, pixel_size=PX)
        assert m.jaccard == 1.0 and m.rmse_lat < 0.01, (fmt, m.jaccard, m.rmse_lat)


def test_napari_reader_opens_every_format(files: dict[str, Path]) -> None:
    ref = None
    for fmt, path in files.items():
        reader = get_reader(str(path))
        assert reader is not None, fmt
        layers = reader(str(path))
        points = next(data for data, _, kind in layers if kind == "points")
        if ref is None:
            ref = points
        np.testing.assert_allclose(points, ref, atol=1e-2, err_msg=fmt)  # (y, x) in nm from the corner


@pytest.mark.parametrize("job", ["link", "drift", "render", "evaluate"])
def test_a_thunderstorm_csv_without_a_pixel_size_runs_through_every_cli(files: dict[str, Path], tmp_path: Path,
                                                                        job: str) -> None:
    csv = files["csv"]
    assert not list(csv.parent.glob("*.json"))
    out = tmp_path / job
    if job == "link":
        from decode_mem.link.__main__ import main

        assert main([str(csv), "--out", str(out), "--radius", "40"]) == 0
    elif job == "drift":
        from decode_mem.drift.__main__ import main

        assert main([str(csv), "--out", str(out)]) == 0
    elif job == "render":
        from decode_mem.render.__main__ import main

        assert main([str(csv), "--out", str(out / "r.png")]) == 0
    else:
        from decode_mem.evaluate.__main__ import main

        assert main([str(csv), "--no_truth", "--radius", "40", "--out", str(out)]) == 0
        assert json.loads((out / "rings_quality.json").read_text())["nena_nm"] is not None
    assert any(out.iterdir())


def test_writing_camera_pixels_from_nm_asks_for_the_pixel_in_one_line(files: dict[str, Path], tmp_path: Path) -> None:
    from decode_mem.errors import ConfigError
    from decode_mem.io.localizations import convert_file

    for target in ("x.hdf5", "x.h5"):
        with pytest.raises(ConfigError, match=r"--pixel_size"):
            convert_file(files["csv"], tmp_path / target)
    n = convert_file(files["csv"], tmp_path / "x.h5", pixel_size=PX)
    back = read_localizations(tmp_path / "x.h5")
    np.testing.assert_allclose(back["x"], read_localizations(files["parquet"])["x"], atol=1e-4)
    assert n == len(back)
