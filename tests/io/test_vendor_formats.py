"""The microscope formats through ``open_stack``: real files from the vendors' software (tests/data/vendor, each with
its source and licence) and files written by the vendors' own libraries read exactly as those libraries read them;
the camera their metadata record; extra dimensions chosen in one line; damaged files give their complete frames
or one line; without the library, one line naming the extra."""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import numpy as np
import pytest
from vendor_files import (
    CZI,
    LIF,
    ND2,
    NDTIFF,
    NDTIFF_CHANNELS,
    SIF,
    SIF_BINNED,
    VENDOR,
    needs,
    write_czi,
    write_ndtiff,
)

from decode_mem.errors import StackError
from decode_mem.io import formats, open_stack

# -- real files: the same frames as the format's own library, and what their metadata record ------------------------

@needs("sif")
@pytest.mark.parametrize("path", [SIF, SIF_BINNED])
def test_andor_sif_reads_as_sif_parser_reads_it(path):
    from sif_parser import np_open

    ref, _ = np_open(str(path))
    with open_stack(path) as stack:
        assert stack.backend == "sif" and stack.shape == ref.shape and stack.dtype == np.float32
        np.testing.assert_array_equal(stack[:], ref)
        np.testing.assert_array_equal(stack[-1, 3:9, 5:12], ref[-1, 3:9, 5:12])


@needs("sif")
def test_andor_sif_metadata():
    with open_stack(SIF) as stack:
        meta = stack.metadata
    assert meta.source == "sif" and meta.values == {"em_gain": 2.0}
    assert meta.acquisition["camera_model"] == "DU888_BV" and meta.acquisition["exposure_ms"] == 500.0
    assert meta.acquisition["frame_interval_ms"] == pytest.approx(1000.04)
    assert meta.settings == {"readout_rate": "30 MHz"}
    with open_stack(SIF_BINNED) as stack:
        assert stack.metadata.acquisition["binning"] == "2x2" and stack.metadata.values["em_gain"] == 56.0


@needs("nd2")
def test_nikon_nd2_reads_as_nd2_reads_it():
    import nd2

    ref = nd2.imread(ND2)
    with open_stack(ND2) as stack:
        assert stack.backend == "nd2" and stack.shape == ref.shape == (53, 64, 64) and stack.dtype == ref.dtype
        np.testing.assert_array_equal(stack[:], ref)
        np.testing.assert_array_equal(stack[7:30:3, 10:20, 40:], ref[7:30:3, 10:20, 40:])
        meta = stack.metadata
    assert meta.source == "nd2" and meta.values == {"pixel_size": 325.0}
    assert meta.acquisition["camera_model"] == "Fusion" and meta.acquisition["camera_serial"] == "500651"
    assert meta.acquisition["exposure_ms"] == 500.0 and meta.acquisition["binning"] == "2x2"
    assert meta.acquisition["frame_interval_ms"] == pytest.approx(500.16, abs=0.01)
    assert meta.settings == {"Scan Mode": "Ultra-quiet"}


@needs("lif")
def test_leica_lif_images_are_series_and_read_as_readlif_reads_them():
    from readlif.reader import LifFile

    with pytest.raises(StackError, match=r"holds 3 images; pass series= .*0 'x_y_lambdaEmi', 1 'x_y_lambdaExc'"):
        open_stack(LIF)
    image = LifFile(str(LIF)).get_image(2)  # Z 11 x λ 10 x T 2: the λ sweep is its channel axis
    with pytest.raises(StackError, match=r"pass z= \(axis Z has 11 entries\); pass channel= \(axis C has 10"):
        open_stack(LIF, series=2)
    with open_stack(LIF, series=2, z=4, channel=3) as stack:
        ref = np.stack([np.asarray(image.get_plane(requested_dims={3: 4, 5: 3, 4: t})) for t in range(2)])
        assert stack.backend == "lif" and stack.shape == (2, 64, 64) and stack.dtype == np.uint8
        np.testing.assert_array_equal(stack[:], ref)
        assert stack.metadata.values["pixel_size"] == pytest.approx(104.814, abs=1e-3)
    with open_stack(LIF, series=0) as stack:  # a λ sweep alone: its planes are the frames
        assert stack.shape == (20, 64, 64)


@needs("czi")
def test_zeiss_czi_reads_as_libczi_reads_it():
    from pylibCZIrw import czi as pyczi

    with pytest.raises(StackError, match=r"pass channel= \(axis C has 2 entries: 0 'LatticeLightsheet 1-T1'"):
        open_stack(CZI)
    with open_stack(CZI, channel=1, z=2) as stack, pyczi.open_czi(str(CZI)) as czi:
        ref = np.stack([czi.read(plane={"T": t, "Z": 2, "C": 1})[..., 0] for t in range(2)])
        assert stack.backend == "czi" and stack.shape == (2, 64, 64) and stack.dtype == np.uint16
        np.testing.assert_array_equal(stack[:], ref)
        np.testing.assert_array_equal(stack[1, 5:17, 30:33], ref[1, 5:17, 30:33])
        meta = stack.metadata
    assert meta.values["pixel_size"] == pytest.approx(144.992) and meta.acquisition["exposure_ms"] == 30.0


def _ndtiff_array(path: Path) -> np.ndarray:
    from ndtiff import Dataset

    with contextlib.redirect_stdout(io.StringIO()):  # ndtiff prints its progress
        return np.asarray(Dataset(str(path)).as_array())


@needs("ndtiff")
def test_micromanager_ndtiff_reads_as_ndtiff_reads_it():
    with open_stack(NDTIFF) as stack:
        assert stack.backend == "ndtiff" and stack.shape == (10, 64, 64)
        np.testing.assert_array_equal(stack[:], _ndtiff_array(NDTIFF))
        meta = stack.metadata
    assert meta.acquisition["exposure_ms"] == 10.0 and "pixel_size" not in meta.values  # PixelSizeUm 1: unset
    with pytest.raises(StackError, match=r"pass channel= \(axis C has 2 entries: 0 'DAPI', 1 'FITC'\)"):
        open_stack(NDTIFF_CHANNELS)
    with open_stack(NDTIFF_CHANNELS, channel=1) as stack:
        np.testing.assert_array_equal(stack[:], _ndtiff_array(NDTIFF_CHANNELS)[:, 1])


# -- files written by the vendors' own libraries ----------------------------------------------------------------------

@needs("czi")
def test_a_czi_written_by_libczi_reads_back_exactly_with_scenes_as_series(tmp_path):
    frames = np.random.default_rng(1).integers(90, 4000, (7, 40, 48), dtype=np.uint16)
    write_czi(tmp_path / "two.czi", frames, scenes=2, pixel_um=0.16)
    with pytest.raises(StackError, match=r"holds 2 scenes; pass series="):
        open_stack(tmp_path / "two.czi")
    for s in (0, 1):
        with open_stack(tmp_path / "two.czi", series=s) as stack:
            np.testing.assert_array_equal(stack[:], frames + s)
            assert stack.metadata.values["pixel_size"] == pytest.approx(160.0)


@needs("ndtiff")
def test_an_ndtiff_written_by_ndtiff_reads_back_exactly(tmp_path):
    frames = np.random.default_rng(2).integers(90, 4000, (9, 33, 41), dtype=np.uint16)
    path = write_ndtiff(tmp_path, frames, {"PixelSizeUm": 0.108, "Camera": "Andor", "Andor-EMGain": "150",
                                           "Exposure": 20.0})
    with open_stack(path) as stack:
        np.testing.assert_array_equal(stack[:], frames)
        assert stack.metadata.values == {"pixel_size": pytest.approx(108.0), "em_gain": 150.0}
        assert stack.metadata.acquisition["exposure_ms"] == 20.0


# -- damage: complete frames and one warning, or one line --------------------------------------------------------------

@needs("sif")
def test_a_cut_sif_gives_its_complete_frames_and_says_so(tmp_path):
    from sif_parser import np_open

    data = SIF.read_bytes()
    start, frame = np_open(str(SIF))[1]["offset"], 51 * 121 * 4  # where the frames start, a frame's bytes
    (tmp_path / "cut.sif").write_bytes(data[: start + 6 * frame + 100])  # 6 whole frames and a bit of the 7th
    with open_stack(tmp_path / "cut.sif") as stack:
        assert len(stack) == 6
        np.testing.assert_array_equal(stack[:], open_stack(SIF)[:6])
        assert "frames 6..9 left out" in stack.notes()[-1]
    (tmp_path / "head.sif").write_bytes(data[:1500])  # cut inside the header: the parser must not spin at the end
    with pytest.raises(StackError, match=r"head.sif: not a readable Andor SIF file"):
        open_stack(tmp_path / "head.sif")


@needs("czi")
def test_a_cut_czi_is_one_line(tmp_path):
    frames = np.random.default_rng(3).integers(0, 999, (4, 24, 24), dtype=np.uint16)
    write_czi(tmp_path / "whole.czi", frames)
    data = (tmp_path / "whole.czi").read_bytes()
    (tmp_path / "cut.czi").write_bytes(data[: len(data) // 2])
    with pytest.raises(StackError, match=r"cut.czi: the CZI header puts its subblock directory at byte \d+, but"):
        open_stack(tmp_path / "cut.czi")


@needs("ndtiff")
def test_an_ndtiff_whose_last_images_are_not_in_its_file_ends_with_its_last_whole_one(tmp_path):
    """As a TIFF cut by a crash: the images the index lists at the end but the file does not hold are left out
    (they used to be repaired as flat frames: 3 or more of 6, beyond any damage budget)."""
    frames = np.random.default_rng(4).integers(90, 4000, (6, 20, 20), dtype=np.uint16)
    path = write_ndtiff(tmp_path, frames)
    tif = next(path.glob("*.tif"))
    data = tif.read_bytes()
    tif.write_bytes(data[: len(data) - 3 * 20 * 20 * 2 - 2000])  # the last images' pixels (and the tail) gone
    with open_stack(path) as stack:
        read = stack[:]
        assert 0 < len(read) < 6
        np.testing.assert_array_equal(read, frames[:len(read)])
        assert [d.repaired for d in stack.damage.records] == [False]
        assert f"time points {len(read)}..5 left out" in stack.notes()[-1]


@needs("lif")
def test_a_cut_lif_is_one_line_or_its_complete_frames(tmp_path):
    data = LIF.read_bytes()
    (tmp_path / "cut.lif").write_bytes(data[: len(data) - 4000])
    try:
        stack = open_stack(tmp_path / "cut.lif", series=2, z=0, channel=0)
    except StackError as e:
        assert str(e).startswith(str(tmp_path / "cut.lif")) and "\n" not in str(e)
    else:
        with stack:
            ref = open_stack(LIF, series=2, z=0, channel=0)[: len(stack)]
            np.testing.assert_array_equal(stack[:], ref)


def test_without_the_library_a_file_gets_one_line_naming_the_extra(tmp_path, monkeypatch):
    shutil.copy(SIF, tmp_path / "m.sif")
    monkeypatch.setattr(formats.VendorFormat, "available", lambda self: False)
    with pytest.raises(StackError, match=r"m.sif: a Andor SIF file; reading it needs the sif_parser library of the "
                                         r"'formats' extra: pip install"):
        open_stack(tmp_path / "m.sif")


@pytest.mark.parametrize(("name", "head"), [("nd2", b"\xda\xce\xbe\x0a" + bytes(60)),
                                            ("czi", b"ZISRAWFILE" + bytes(54)),
                                            ("lif", b"\x70\x00\x00\x00\x10\x00\x00\x00\x2a" + bytes(55)),
                                            ("sif", b"Andor Technology Multi-Channel File\n" + bytes(28))])
def test_formats_are_known_by_their_first_bytes_not_their_names(tmp_path, name, head):
    assert formats.sniff(head) is formats.FORMATS[name]
    (tmp_path / "movie.tif").write_bytes(head)  # a misleading name
    assert formats.vendor_format(tmp_path / "movie.tif") is formats.FORMATS[name]


def test_a_nikon_movie_exported_by_fiji_keeps_its_camera():
    """An ImageJ TIFF that Fiji's Bio-Formats exported from an ND2 (a real sptPALM movie: tests/data/real): the
    camera in its Info text, the pixel size in its resolution."""
    path = VENDOR.parent / "real" / "freetrace_sptpalm_ixon897" / "sample0.tiff"
    with open_stack(path) as stack:
        meta = stack.metadata
    assert meta.source == "imagej" and meta.values == {"em_gain": 300.0, "pixel_size": 160.0}
    assert meta.acquisition["camera_model"] == "DU897_BV" and meta.acquisition["camera_serial"] == "X-8573"
    assert meta.acquisition["exposure_ms"] == 10.0 and meta.settings["ConversionGain"] == "2"
