"""A real movie's first hour, on small real camera movies from public repositories (tests/data/real, licences and
sources beside them): infer -> evaluate --no_truth -> render with no flags a user would have to know, and warnings
that agree with each other: the fix the first warning offers is one that removes it, calibrate's verdict is infer's,
and the super-resolution image shows the localizations."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from decode_mem.model.choice import choose_model

REAL = Path(__file__).resolve().parents[1] / "data" / "real"
SPTPALM = REAL / "freetrace_sptpalm_ixon897" / "sample0.tiff"  # Andor iXon 897, EM gain 300, 160 nm: in its metadata
DSTORM = REAL / "locan_images" / "images.tif"  # 5 EMCCD frames, no metadata
ENGINE = ["--threads", "1", "--compile", "off", "--engine", "torch", "--quiet"]


def _run(job: str, argv: list[str], capsys) -> tuple[int, str]:
    from importlib import import_module

    code = import_module(f"decode_mem.{job}.__main__").main(argv)
    return code, capsys.readouterr().err


@pytest.mark.slow
def test_an_emccd_sptpalm_movie_through_infer_evaluate_and_render(tmp_path, capsys):
    out = tmp_path / "locs"
    code, err = _run("infer", [str(SPTPALM), "--out", str(out), *ENGINE], capsys)
    assert code == 0
    # the file gives the pixel size and EM gain; its e-/ADU is not recorded: the camera check says so, once, and
    # offers a conversion a camera can have first (no negative baseline)
    warning = next(line for line in err.splitlines() if "outside the model's domain" in line)
    assert "baseline would be ~-" not in warning
    suggested = float(re.search(r"e_per_adu would be ~([0-9.]+)", warning).group(1))
    summary = json.loads((out / "sample0.json").read_text())
    assert summary["camera"]["pixel_size"] == 160.0 and summary["camera"]["em_gain"] == 300.0
    assert summary["camera_sources"]["pixel_size"] == "file metadata (imagej)"
    # calibrate says the same about the same movie: one verdict
    code, _ = _run("calibrate", [str(SPTPALM), "--out", str(tmp_path / "calib.yaml"), "--frames", "100"], capsys)
    assert code == 0
    # the suggested fix removes the warning
    fixed = tmp_path / "fixed"
    code, err = _run("infer", [str(SPTPALM), "--out", str(fixed), "--e_per_adu", f"{suggested:g}", *ENGINE], capsys)
    assert code == 0 and "outside the model's domain" not in err, err
    # decode_mem's own CSV goes on with no pixel size given
    code, err = _run("evaluate", [str(fixed / "sample0.csv"), "--no_truth", "--out", str(tmp_path / "q"),
                                  "--quiet"], capsys)
    assert code == 0, err
    code, err = _run("render", [str(fixed / "sample0.csv"), "--out", str(tmp_path / "image.png"), "--quiet"], capsys)
    assert code == 0, err
    image = imread(tmp_path / "image.png")
    assert image.shape[0] < 4000 and image.shape[1] < 4000  # a picture of the field, not of every nm
    assert float(np.mean(image[..., :3].max(axis=-1) > 0.2)) > 0.001  # not black: localizations are drawn


def test_a_dstorm_movie_without_metadata_runs_with_the_model_camera_and_says_where_it_came_from(tmp_path, capsys):
    out = tmp_path / "locs"
    code, err = _run("infer", [str(DSTORM), "--out", str(out), *ENGINE], capsys)
    assert code == 0
    summary = json.loads((out / "images.json").read_text())
    source = f"the model's camera ({choose_model(None, 'cpu').path.name})"  # the shipped model a CPU takes
    assert set(summary["camera_sources"].values()) <= {source}
    report = html.unescape((out / "report.html").read_text())
    assert "camera of images" in report and f"[{source}]" in report
    # no metadata, the model's camera: the noise names the baseline (the README's 450-530 ADU), the only fix a
    # camera can have (the e-/ADU that would explain it is far beyond any camera)
    warning = next(line for line in err.splitlines() if "outside the model's domain" in line)
    baseline = float(re.search(r"the baseline would be ~([0-9.]+) ADU", warning).group(1))
    assert 400 <= baseline <= 560 and "e_per_adu would be" not in warning, warning
