"""The Localize widget on napari's viewer: it runs infer's library entry point in a worker thread; its layers are
infer's CSV, its files the CLI's; Cancel leaves nothing half-written and the run continues with resume; bad input
is a line in the widget."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("napari", reason="the napari extra is not installed (pip install -e '.[napari]')")
pytest.importorskip("pytestqt", reason="the napari extra is not installed (pip install -e '.[napari]')")

from decode_mem.napari.localize import A_FILE, LocalizeWidget
from decode_mem.napari.sample import sample_movie
from decode_mem.render.image import render_shape

RUN_S = 300_000  # ms: the longest a tiny run may take on a busy 2-core machine


@pytest.fixture(scope="module")
def movie(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quick start's nuclear pores, 40 frames of 32 x 32 px."""
    return sample_movie(tmp_path_factory.mktemp("movie"), frames=40, size=32)


def run(widget: LocalizeWidget, qtbot) -> None:
    widget.start()
    qtbot.waitUntil(lambda: not widget.running, timeout=RUN_S)


def csv_rows(path: Path) -> dict[str, np.ndarray]:
    header = path.read_text().splitlines()[0].split(",")
    values = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    return {h.strip('"'): values[:, i] for i, h in enumerate(header)}


def test_the_widget_localizes_a_movie_layer_into_the_clis_files_and_shows_them(viewer, qtbot, movie: Path,
                                                                              tmp_path: Path) -> None:
    from decode_mem.infer.__main__ import main

    viewer.open(str(movie))  # napari's own TIFF reader: the layer knows its file
    widget = LocalizeWidget(viewer)
    assert widget.source.value == movie.stem
    widget.device.value, widget.out.value = "cpu", tmp_path / "widget"
    run(widget, qtbot)
    assert "done: 1 stack(s), 40 frames" in widget.log.value, widget.log.value
    assert widget.progress.value == widget.progress.max == 40
    csv = tmp_path / "widget" / f"{movie.stem}.csv"
    rows = csv_rows(csv)
    points = viewer.layers[f"{movie.stem} localizations"]
    assert len(rows["frame"]) > 20  # the rings blink: tens of localizations
    np.testing.assert_allclose(points.data, np.column_stack([rows["y [nm]"], rows["x [nm]"]]), rtol=1e-6)
    np.testing.assert_array_equal(points.features["frame"], rows["frame"] - 1)
    np.testing.assert_allclose(points.features["photons"], rows["intensity [photon]"], rtol=1e-6)
    image = viewer.layers[f"{movie.stem} render"]
    rp = image.metadata["decode_mem"]["render_pixel"]  # chosen from the localizations' precision
    assert tuple(image.scale) == (rp, rp) and image.data.shape == render_shape((32, 32), 100.0, rp)  # 32 px of 100 nm
    # the CLI with the same settings writes the same localizations and the same kind of summary
    command = (tmp_path / "widget" / "report.html").read_text()
    assert "--engine torch" in command  # the command the report shows is the one that gives the same numbers
    assert main([str(movie), "--out", str(tmp_path / "cli"), "--device", "cpu", "--engine", "torch", "--quiet"]) == 0
    cli = csv_rows(tmp_path / "cli" / f"{movie.stem}.csv")
    assert rows.keys() == cli.keys()
    np.testing.assert_array_equal(rows["frame"], cli["frame"])
    for key in rows:  # the same numbers to the last digit printed, give or take its rounding (the two runs may
        # choose different tiles: the same emitters, float sums in another order)
        np.testing.assert_allclose(rows[key], cli[key], rtol=1e-5, atol=2e-4, err_msg=key)
    ours, theirs = (json.loads((tmp_path / d / f"{movie.stem}.json").read_text()) for d in ("widget", "cli"))
    assert ours.keys() == theirs.keys() and ours["settings"] == theirs["settings"]
    assert "python -m decode_mem.infer" in (tmp_path / "widget" / "report.html").read_text()
    movie_layer = viewer.layers[movie.stem]  # now in nm too, under its localizations
    assert tuple(movie_layer.scale) == (1.0, 100.0, 100.0) and tuple(movie_layer.translate) == (0.0, 50.0, 50.0)


def test_an_in_memory_layer_is_localized_through_a_temporary_file(viewer, qtbot, movie: Path,
                                                                  tmp_path: Path) -> None:
    import tifffile

    viewer.add_image(tifffile.imread(movie), name="pores in memory")
    widget = LocalizeWidget(viewer)
    widget.source.value = "pores in memory"
    widget.device.value, widget.out.value = "cpu", tmp_path
    run(widget, qtbot)
    assert "done: 1 stack(s), 40 frames" in widget.log.value, widget.log.value
    assert (tmp_path / "pores_in_memory.csv").is_file() and widget.temporary is None
    assert len(viewer.layers["pores_in_memory localizations"].data) == widget.opened[0].n > 20


def test_cancel_stops_with_nothing_half_written_and_resume_finishes_as_one_run(viewer, qtbot, movie: Path,
                                                                               tmp_path: Path) -> None:
    from decode_mem.infer import InferConfig, run_inference

    widget = LocalizeWidget(viewer)
    widget.source.value = A_FILE
    widget.path.value, widget.device.value, widget.out.value, widget.block.value = movie, "cpu", tmp_path, 4
    widget.start()
    qtbot.waitUntil(lambda: widget.progress.value >= 4, timeout=RUN_S)  # the first block is done
    widget.cancel()
    qtbot.waitUntil(lambda: not widget.running, timeout=RUN_S)
    assert "stopped: " in widget.log.value and "Traceback" not in widget.log.value, widget.log.value
    assert widget.progress.value < 40
    finals = [p.name for p in tmp_path.iterdir() if p.name.startswith(movie.stem) and p.is_file()
              and not p.name.endswith(".partial")]
    assert finals == [], finals  # no <stem>.csv, no <stem>.json: nothing under a final name
    # only the CSV's temporary file, whole up to the journal's last part: the resume continues it (docs/resume.md)
    assert [p.name for p in tmp_path.rglob("*.partial*")] == [f"{movie.stem}.csv.partial"], list(tmp_path.rglob("*"))
    parts = json.loads((tmp_path / f"{movie.stem}.progress" / "parts.json").read_text())["parts"]
    assert (tmp_path / f"{movie.stem}.csv.partial").stat().st_size == parts[-1]["outputs"][f"{movie.stem}.csv"]["bytes"]
    widget.resume.value = True
    run(widget, qtbot)
    assert "done: 1 stack(s)" in widget.log.value, widget.log.value
    run_inference(InferConfig(inputs=(str(movie),), out=str(tmp_path / "once"), device="cpu", block=4,
                              report=False))
    # the same rows; values equal up to float32 rounding: the widget and this run pick their thread counts from the
    # idle cores, and another count sums in another order (1 ulp of a photon count seen on an idle machine)
    got, once = (np.loadtxt(p / f"{movie.stem}.csv", delimiter=",", skiprows=1) for p in (tmp_path, tmp_path / "once"))
    assert got.shape == once.shape and np.array_equal(got[:, :2], once[:, :2])
    np.testing.assert_allclose(got, once, rtol=1e-6, atol=1e-4)


def test_bad_input_is_a_line_in_the_widget(viewer, qtbot, tmp_path: Path) -> None:
    widget = LocalizeWidget(viewer)
    widget.source.value = A_FILE
    widget.start()
    assert widget.log.value == "error: choose an output folder" and not widget.running
    widget.out.value, widget.device.value = tmp_path / "out", "cpu"
    widget.start()
    assert widget.log.value == "error: choose a movie layer, or a file or folder to localize"
    bad = tmp_path / "broken.tif"
    bad.write_text("not a TIFF")
    widget.path.value = bad
    run(widget, qtbot)
    lines = widget.log.value.splitlines()
    assert lines[-1].startswith("error: ") and "broken.tif" in lines[-1] and "Traceback" not in widget.log.value
    assert not (tmp_path / "out" / "broken.csv").exists() and widget.run_button.enabled


def test_fit_to_this_movie_calibrates_decides_and_localizes(viewer, qtbot, movie: Path, tmp_path: Path) -> None:
    from decode_mem.napari.localize import MODELS

    widget = LocalizeWidget(viewer)
    widget.source.value = A_FILE
    widget.path.value, widget.device.value, widget.out.value = movie, "cpu", tmp_path
    widget.model.value, widget.budget.value = MODELS[2], 1.0
    run(widget, qtbot)
    log = widget.log.value
    assert "fit: calibrate" in log and "fit: base model" in log, log  # the quick start's physics: no training
    assert "done: 1 stack(s), 40 frames" in log and (tmp_path / "calib.yaml").is_file()
    rows = csv_rows(tmp_path / f"{movie.stem}.csv")
    np.testing.assert_allclose(viewer.layers[f"{movie.stem} localizations"].data,
                               np.column_stack([rows["y [nm]"], rows["x [nm]"]]), rtol=1e-6)
