"""``infer`` on the microscopes' files: a movie written as CZI (Zeiss's libCZI) or NDTiff (Micro-Manager's ndtiff)
localizes exactly as the same movie as TIFF; a file that records its pixel size and EM gain localizes with no camera
flags as it does with the right flags; ``<stem>.json`` says where every camera number came from."""

from __future__ import annotations

import json

import numpy as np
import tifffile
from vendor_files import ND2, SIF, needs, write_czi, write_ndtiff

from decode_mem.infer import InferConfig, run_inference
from decode_mem.infer.config import find_stacks

ENGINE = {"block": 4, "chunk_size": 32, "batch_size": 8, "amp": "off", "threads": 1, "compile": False,
          "device": "cpu", "report": False, "formats": ("csv",)}
FRAMES = 12


def _run(path, out, model, **kw):
    report = run_inference(InferConfig(inputs=(str(path),), out=str(out), model=str(model), **ENGINE, **kw))
    assert report.ok and len(report.stacks) == 1
    stem = report.stacks[0].stem
    return (out / f"{stem}.csv").read_text(), json.loads((out / f"{stem}.json").read_text())


@needs("czi")
@needs("ndtiff")
def test_a_movie_as_czi_or_ndtiff_localizes_exactly_as_the_same_movie_as_tiff(sample_frames, shipped_model, tmp_path):
    frames = np.ascontiguousarray(sample_frames[:FRAMES, :48, :48])
    tifffile.imwrite(tmp_path / "movie.tif", frames)
    write_czi(tmp_path / "movie.czi", frames, pixel_um=0.1)  # the model's camera: 100 nm pixels
    ndtiff = write_ndtiff(tmp_path / "nd", frames)
    ref, _ = _run(tmp_path / "movie.tif", tmp_path / "tif", shipped_model)
    assert ref.count("\n") > 100
    for path, out in ((tmp_path / "movie.czi", "czi"), (ndtiff, "ndtiff")):
        csv, summary = _run(path, tmp_path / out, shipped_model)
        assert csv == ref, out
        assert summary["shape"] == [FRAMES, 48, 48]


@needs("ndtiff")
def test_the_camera_comes_from_the_file_and_a_flag_still_wins(sample_frames, shipped_model, tmp_path):
    frames = np.ascontiguousarray(sample_frames[:FRAMES, :48, :48])
    # what Micro-Manager records of an Andor EMCCD: the pixel size (µm) and the camera device's EM gain
    ndtiff = write_ndtiff(tmp_path / "nd", frames, {"PixelSizeUm": 0.16, "Camera": "Andor", "Andor-EMGain": "150",
                                                    "Exposure": 30.0})
    tifffile.imwrite(tmp_path / "plain.tif", frames)
    from_file, summary = _run(ndtiff, tmp_path / "file", shipped_model)
    with_flags, _ = _run(tmp_path / "plain.tif", tmp_path / "flags", shipped_model,
                         camera_overrides={"pixel_size": 160.0, "em_gain": 150.0})
    defaults, _ = _run(tmp_path / "plain.tif", tmp_path / "defaults", shipped_model)
    assert from_file == with_flags != defaults
    assert summary["camera"]["pixel_size"] == 160.0 and summary["camera"]["em_gain"] == 150.0
    sources = summary["camera_sources"]
    assert sources["pixel_size"] == sources["em_gain"] == "file metadata (ndtiff)"
    assert sources["baseline"].startswith("the model's camera")
    assert summary["file_metadata"]["acquisition"]["exposure_ms"] == 30.0
    overridden, summary = _run(ndtiff, tmp_path / "flag", shipped_model, camera_overrides={"em_gain": 300.0})
    assert summary["camera"]["em_gain"] == 300.0 and summary["camera_sources"]["em_gain"] == "flag"
    assert overridden != from_file


@needs("sif")
@needs("nd2")
def test_a_folder_contributes_its_microscope_files_and_ndtiff_datasets(tmp_path):
    import shutil

    shutil.copy(SIF, tmp_path / "a.sif")
    shutil.copy(ND2, tmp_path / "b.nd2")
    dataset = tmp_path / "run_1"
    dataset.mkdir()
    (dataset / "NDTiff.index").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not a movie")
    found = find_stacks((str(tmp_path),))
    assert [p.name for p in found.stacks] == ["a.sif", "b.nd2", "run_1"] and not found.missing
    assert find_stacks((str(dataset),)).stacks == (dataset.resolve(),)


@needs("sif")
def test_a_file_naming_its_camera_without_its_conversion_says_what_came_from_the_defaults(shipped_model, tmp_path):
    import shutil

    from infer_helpers import WarningLines

    shutil.copy(SIF, tmp_path / "andor.sif")  # an iXon Ultra 888's SIF: EM gain and camera, no e-/ADU or pixel size
    seen = WarningLines()
    report = run_inference(InferConfig(inputs=(str(tmp_path / "andor.sif"),), out=str(tmp_path / "out"),
                                       model=str(shipped_model), **{**ENGINE, "report": True}), seen)
    assert report.ok
    gap = [line for line in seen.lines if "names its camera (DU888_BV)" in line]
    assert len(gap) == 1 and "e_per_adu" in gap[0] and "the model's camera" in gap[0], seen.lines

    summary = json.loads((tmp_path / "out" / "andor.json").read_text())
    assert summary["camera_sources"]["em_gain"] == "file metadata (sif)" and summary["camera"]["em_gain"] == 2.0
    assert summary["camera_sources"]["kind"].startswith("camera table: Andor iXon 888")
    html = (tmp_path / "out" / "report.html").read_text()
    assert "camera of andor" in html and "EM gain 2 [file metadata (sif)]" in html
    assert "names its camera (DU888_BV)" in html and summary["camera_warning"] == gap[0].split(": ", 1)[1]
