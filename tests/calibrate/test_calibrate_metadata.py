"""Pixel size and camera settings from OME-TIFF, ImageJ and Micro-Manager files written by tifffile."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tifffile
from calibrate_helpers import movie

from decode_mem.calibrate import calibrate_movie, read_metadata, resolve_camera
from decode_mem.io.metadata import MovieMetadata

FRAMES = np.zeros((3, 16, 16), dtype=np.uint16)

OME_WITH_DETECTOR = """<?xml version="1.0" encoding="UTF-8"?>
<OME xmlns="http://www.openmicroscopy.org/Schemas/OME/2016-06">
 <Instrument ID="Instrument:0"><Detector ID="Detector:0" Type="EMCCD" Gain="150" Offset="498"/></Instrument>
 <Image ID="Image:0"><Pixels ID="Pixels:0" DimensionOrder="XYCZT" Type="uint16" SizeX="16" SizeY="16" SizeC="1"
  SizeZ="1" SizeT="3" PhysicalSizeX="160" PhysicalSizeXUnit="nm" PhysicalSizeY="160" PhysicalSizeYUnit="nm">
  <Channel ID="Channel:0:0" SamplesPerPixel="1"><DetectorSettings ID="Detector:0" Gain="200"/></Channel>
  <TiffData IFD="0" PlaneCount="3"/></Pixels></Image></OME>"""


@pytest.mark.parametrize(("size", "unit", "nm"), [(0.065, "µm", 65.0), (108.0, "nm", 108.0)])
def test_ome_physical_size(tmp_path: Path, size: float, unit: str, nm: float) -> None:
    path = tmp_path / "m.ome.tif"
    tifffile.imwrite(path, FRAMES, ome=True, metadata={"axes": "TYX", "PhysicalSizeX": size,
                                                       "PhysicalSizeXUnit": unit})
    meta = read_metadata(path)
    assert meta.source == "ome" and meta.values["pixel_size"] == pytest.approx(nm)


def test_ome_detector_kind_gain_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "m.ome.tif"
    tifffile.imwrite(path, FRAMES, description=OME_WITH_DETECTOR, metadata=None, photometric="minisblack")
    meta = read_metadata(path)
    # the channel's DetectorSettings override the Detector's own gain
    assert meta == MovieMetadata("ome", {"pixel_size": 160.0, "kind": "emccd", "em_gain": 200.0, "baseline": 498.0})


@pytest.mark.parametrize(("unit", "nm"), [("um", 160.0), ("micron", 160.0), ("nm", 0.16), ("pixel", None)])
def test_imagej_resolution_and_unit(tmp_path: Path, unit: str, nm: float | None) -> None:
    path = tmp_path / "m.tif"
    tifffile.imwrite(path, FRAMES, imagej=True, resolution=(1 / 0.16, 1 / 0.16), metadata={"unit": unit, "axes": "TYX"})
    meta = read_metadata(path)
    if nm is None or nm < 1:  # 'pixel' is no length; 0.16 nm is no physical pixel
        assert meta.source is None and meta.values == {}
    else:
        assert meta.source == "imagej" and meta.values["pixel_size"] == pytest.approx(nm)


def test_micromanager_pixel_size_and_em_gain(tmp_path: Path) -> None:
    path = tmp_path / "m.tif"
    tags = json.dumps({"PixelSizeUm": 0.108, "Camera": "Andor", "Andor-EMGain": "250", "Andor-Binning": "1"})
    tifffile.imwrite(path, FRAMES, photometric="minisblack", extratags=[(51123, "s", 0, tags, True)])
    meta = read_metadata(path)
    assert meta.source == "micromanager" and meta.values == {"pixel_size": 108.0, "em_gain": 250.0}
    assert meta.acquisition == {"camera_model": "Andor"} and meta.settings == {"EMGain": "250"}  # the device's


def test_files_without_metadata(tmp_path: Path) -> None:
    tifffile.imwrite(tmp_path / "plain.tif", FRAMES, photometric="minisblack")
    np.save(tmp_path / "m.npy", FRAMES)
    (tmp_path / "text.tif").write_text("not a tiff")
    for name in ("plain.tif", "m.npy", "text.tif", "missing.tif"):
        assert read_metadata(tmp_path / name) == MovieMetadata()


def test_flags_win_over_the_camera_file_over_metadata_over_defaults() -> None:
    meta = MovieMetadata("ome", {"pixel_size": 65.0, "em_gain": 200.0, "baseline": 498.0, "kind": "emccd"})
    camera, sources = resolve_camera(meta, camera_file={"em_gain": 150.0, "e_per_adu": 12.0},
                                     flags={"baseline": 480.0, "qe": None})
    assert (camera.pixel_size, camera.em_gain, camera.e_per_adu, camera.baseline) == (65.0, 150.0, 12.0, 480.0)
    assert sources["pixel_size"] == "file metadata (ome)" and sources["em_gain"] == "camera file"
    assert sources["baseline"] == "flag" and sources["qe"] == "default (emccd)"
    # the kind (from any layer) picks the defaults of the other fields
    camera, sources = resolve_camera(MovieMetadata("ome", {"kind": "scmos"}))
    assert camera.kind == "scmos" and camera.e_per_adu == 0.5 and sources["e_per_adu"] == "default (scmos)"


def test_calibration_uses_and_records_the_metadata(tmp_path: Path) -> None:
    adu = movie(1.0, 100.0, "emccd", seed=110)[0]
    path = tmp_path / "m.ome.tif"
    tifffile.imwrite(path, adu[:40], ome=True, metadata={"axes": "TYX", "PhysicalSizeX": 0.065})
    cal = calibrate_movie(path)  # no camera given: the metadata's pixel size, default EMCCD otherwise
    assert cal.camera.pixel_size == 65.0 and cal.camera_sources["pixel_size"] == "file metadata (ome)"
    assert cal.value("psf_sigma_nm") == pytest.approx(65.0 * cal.value("psf_sigma_px"))
    data = cal.to_yaml_dict()
    assert data["metadata_source"] == "ome" and data["camera"]["pixel_size"] == 65.0
    assert data["train"]["simulation"]["camera"]["pixel_size"] == 65.0
