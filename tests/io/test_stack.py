"""Every stack reader passes the same contract; files are written with tifffile / zarr / numpy themselves."""

from __future__ import annotations

import importlib.util
import pickle
import uuid
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

from decode_mem.io import Stack, open_stack

T, H, W = 7, 32, 48


def movie(shape: tuple[int, ...] = (T, H, W), dtype: str = "uint16", seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(90, 4000, size=shape).astype(dtype)


def assert_blocks_match(stack: Stack, expected: np.ndarray, length: int, context: int) -> None:
    """blocks() == windows of the edge-padded reference (DECODE: the edge frame repeats beyond the ends)."""
    ref = np.pad(expected, ((context, context), (0, 0), (0, 0)), mode="edge")
    starts = []
    for t0, frames in stack.blocks(length, context=context):
        n = min(length, len(expected) - t0)
        assert frames.shape == (n + 2 * context, *expected.shape[1:])
        np.testing.assert_array_equal(frames, ref[t0: t0 + n + 2 * context], err_msg=f"block at {t0}")
        starts.append(t0)
    assert starts == list(range(0, len(expected), length))


class StackReaderContract:
    """Subclasses write ``data`` with the real library in ``make`` and return (path, open_stack kwargs)."""

    backend = ""

    def make(self, tmp_path: Path) -> tuple[Path, dict, np.ndarray]:
        """-> path, open_stack keyword arguments, the (T, H, W) frames the stack must show."""
        raise NotImplementedError

    @pytest.fixture
    def case(self, tmp_path: Path) -> tuple[Stack, np.ndarray]:
        path, kwargs, expected = self.make(tmp_path)
        with open_stack(path, **kwargs) as stack:
            yield stack, expected

    def test_shape_dtype_backend(self, case: tuple[Stack, np.ndarray]) -> None:
        stack, expected = case
        assert stack.shape == expected.shape and len(stack) == expected.shape[0] and stack.ndim == 3
        assert stack.dtype == expected.dtype
        assert stack.backend == self.backend
        assert self.backend in stack.describe() and str(expected.shape) in stack.describe()

    def test_frames_and_slices(self, case: tuple[Stack, np.ndarray]) -> None:
        stack, expected = case
        n = len(stack)
        np.testing.assert_array_equal(stack.read(0, n), expected)
        for key in (0, n - 1, -1, -n, slice(None), slice(1, n - 1), slice(None, None, 2), slice(None, None, -1),
                    slice(-2, None), slice(n, None), (n // 2, slice(3, 20), slice(5, 40, 3)), (slice(0, 2), 4),
                    (-1, slice(None, None, -2), 7)):
            got = stack[key]
            np.testing.assert_array_equal(got, expected[key], err_msg=repr(key))
            assert type(got) is np.ndarray and got.flags.c_contiguous and got.flags.writeable
        with pytest.raises(IndexError):
            stack[n]

    def test_iteration(self, case: tuple[Stack, np.ndarray]) -> None:
        stack, expected = case
        np.testing.assert_array_equal(np.stack(list(stack)), expected)

    @pytest.mark.parametrize(("length", "context"), [(3, 1), (1, 0), (T + 5, 2)])
    def test_blocks_match_edge_padded_reference(self, case: tuple[Stack, np.ndarray], length: int,
                                                context: int) -> None:
        stack, expected = case
        assert_blocks_match(stack, expected, length, context)

    def test_pickle_reopens_lazily(self, case: tuple[Stack, np.ndarray]) -> None:
        stack, expected = case
        blob = pickle.dumps(stack)
        assert len(blob) < 2000  # path + options, never the data or a file handle
        clone = pickle.loads(blob)
        assert "not open" in repr(clone)
        np.testing.assert_array_equal(clone[-1], expected[-1])
        assert clone.shape == stack.shape
        clone.close()

    def test_close(self, case: tuple[Stack, np.ndarray]) -> None:
        stack, _ = case
        stack.close()
        assert "closed" in repr(stack)
        with pytest.raises(ValueError, match="closed"):
            stack[0]


class TestTiffContiguous(StackReaderContract):
    backend = "memmap"

    def make(self, tmp_path):
        data = movie()
        tifffile.imwrite(tmp_path / "m.tif", data)
        return tmp_path / "m.tif", {}, data


class TestBigTiff(StackReaderContract):
    backend = "memmap"

    def make(self, tmp_path):
        data = movie(dtype="float32")
        tifffile.imwrite(tmp_path / "m.tif", data, bigtiff=True)
        assert tifffile.TiffFile(tmp_path / "m.tif").is_bigtiff
        return tmp_path / "m.tif", {}, data


class TestBigEndianTiff(StackReaderContract):
    backend = "memmap"

    def make(self, tmp_path):
        data = movie()
        tifffile.imwrite(tmp_path / "m.tif", data, byteorder=">")
        return tmp_path / "m.tif", {}, data


class TestImageJHyperstack(StackReaderContract):
    """TZCYX hyperstack: channel= and z= pin C and Z, T is the frame axis."""

    backend = "memmap"

    def make(self, tmp_path):
        data = movie((T, 3, 2, H, W))
        tifffile.imwrite(tmp_path / "h.tif", data, imagej=True, metadata={"axes": "TZCYX"})
        return tmp_path / "h.tif", {"channel": 1, "z": 2}, data[:, 2, 1]


class TestImageJSlices(StackReaderContract):
    """ImageJ stores a plain 3-D stack as slices (tifffile reports axes CYX): they are the frames."""

    backend = "memmap"

    def make(self, tmp_path):
        data = movie()
        tifffile.imwrite(tmp_path / "s.tif", data, imagej=True)
        return tmp_path / "s.tif", {}, data


class TestTiffZlib(StackReaderContract):
    backend = "tiff-zarr"
    compression = "zlib"

    def make(self, tmp_path):
        data = movie()
        tifffile.imwrite(tmp_path / "c.tif", data, compression=self.compression)
        return tmp_path / "c.tif", {}, data


NEEDS_IMAGECODECS = pytest.mark.skipif(importlib.util.find_spec("imagecodecs") is None,
                                       reason="LZW / zstd TIFFs need imagecodecs (absent on the first GPU machine)")


@NEEDS_IMAGECODECS
class TestTiffLzw(TestTiffZlib):
    compression = "lzw"


@NEEDS_IMAGECODECS
class TestTiffZstd(TestTiffZlib):
    compression = "zstd"


class TestTiffTiled(StackReaderContract):
    backend = "tiff-zarr"

    def make(self, tmp_path):
        data = movie()
        tifffile.imwrite(tmp_path / "t.tif", data, tile=(16, 16))
        return tmp_path / "t.tif", {}, data


class TestOmeTiff(StackReaderContract):
    backend = "memmap"  # tifffile writes OME-TIFF contiguously

    def make(self, tmp_path):
        data = movie((T, 2, H, W))
        tifffile.imwrite(tmp_path / "o.ome.tif", data, ome=True, metadata={"axes": "TCYX"})
        return tmp_path / "o.ome.tif", {"channel": 0}, data[:, 0]


class TestOmeTiffCompressed(StackReaderContract):
    backend = "tiff-zarr"

    def make(self, tmp_path):
        data = movie((T, 3, H, W))
        tifffile.imwrite(tmp_path / "o.ome.tif", data, ome=True, metadata={"axes": "TZYX"}, compression="zlib")
        return tmp_path / "o.ome.tif", {"z": -1}, data[:, 2]


def write_multifile_ome(tmp_path: Path, data: np.ndarray, split: int,
                        names: tuple[str, str] = ("part0.ome.tif", "part1.ome.tif")) -> tuple[Path, Path]:
    """Two OME-TIFF files sharing one OME-XML image; frames [0, split) in the first file."""
    uuids = [uuid.uuid4().urn, uuid.uuid4().urn]
    n, h, w = data.shape
    tiffdata = (f'<TiffData FirstT="0" IFD="0" PlaneCount="{split}"><UUID FileName="{names[0]}">{uuids[0]}</UUID>'
                f'</TiffData><TiffData FirstT="{split}" IFD="0" PlaneCount="{n - split}">'
                f'<UUID FileName="{names[1]}">{uuids[1]}</UUID></TiffData>')
    for name, own, part in zip(names, uuids, (data[:split], data[split:]), strict=True):
        xml = (f'<?xml version="1.0" encoding="UTF-8"?><OME xmlns="http://www.openmicroscopy.org/Schemas/OME/2016-06"'
               f' UUID="{own}"><Image ID="Image:0"><Pixels ID="Pixels:0" DimensionOrder="XYZCT" Type="{data.dtype}"'
               f' SizeX="{w}" SizeY="{h}" SizeZ="1" SizeC="1" SizeT="{n}"><Channel ID="Channel:0:0"'
               f' SamplesPerPixel="1"/>{tiffdata}</Pixels></Image></OME>')
        tifffile.imwrite(tmp_path / name, part, description=xml, metadata=None, photometric="minisblack")
    return tmp_path / names[0], tmp_path / names[1]


class TestOmeTiffMultiFile(StackReaderContract):
    backend = "tiff-zarr"  # data span two files: no single mapping

    def make(self, tmp_path):
        data = movie()
        first, _ = write_multifile_ome(tmp_path, data, split=3)
        return first, {}, data


class TestZarrV2(StackReaderContract):
    backend = "zarr"

    def make(self, tmp_path):
        data = movie()
        z = zarr.create_array(tmp_path / "v2.zarr", shape=data.shape, dtype=data.dtype, chunks=(2, 16, 16),
                              zarr_format=2)
        z[:] = data
        return tmp_path / "v2.zarr", {}, data


class TestZarrV3(StackReaderContract):
    backend = "zarr"

    def make(self, tmp_path):
        data = movie(dtype="int16")
        z = zarr.create_array(tmp_path / "v3.zarr", shape=data.shape, dtype=data.dtype, chunks=(3, 16, 32))
        z[:] = data
        return tmp_path / "v3.zarr", {}, data


class TestZarrV3Sharded(StackReaderContract):
    """Sharded v3 with named dimensions: c is pinned by channel=."""

    backend = "zarr"

    def make(self, tmp_path):
        data = movie((2, T, H, W))
        z = zarr.create_array(tmp_path / "s.zarr", shape=data.shape, dtype=data.dtype, chunks=(1, 1, 16, 16),
                              shards=(1, 4, 32, 48), dimension_names=("c", "t", "y", "x"))
        z[:] = data
        return tmp_path / "s.zarr", {"channel": 1}, data[1]


class TestOmeZarr(StackReaderContract):
    """OME-Zarr (NGFF 0.5) image group: level 0 from the multiscales metadata, axes from it too."""

    backend = "zarr"

    def make(self, tmp_path):
        data = movie((T, 2, H, W))
        axes = [{"name": "t", "type": "time"}, {"name": "c", "type": "channel"},
                {"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
        datasets = [{"path": p, "coordinateTransformations": [{"type": "scale", "scale": [1, 1, s, s]}]}
                    for p, s in (("full", 1), ("half", 2))]
        group = zarr.open_group(tmp_path / "img.ome.zarr", mode="w", zarr_format=3)
        group.attrs["ome"] = {"version": "0.5", "multiscales": [{"axes": axes, "datasets": datasets}]}
        group.create_array("full", shape=data.shape, dtype=data.dtype, chunks=(1, 1, H, W))[:] = data
        group.create_array("half", shape=(T, 2, H // 2, W // 2), dtype=data.dtype)[:] = data[:, :, ::2, ::2]
        return tmp_path / "img.ome.zarr", {"channel": 1}, data[:, 1]


class TestBioformats2rawSeries(StackReaderContract):
    """bioformats2raw layout: one OME-Zarr image group per series; series= picks one."""

    backend = "zarr"

    def make(self, tmp_path):
        data = movie()
        root = zarr.open_group(tmp_path / "b2r.zarr", mode="w")
        root.attrs["bioformats2raw.layout"] = 3
        for series, frames in enumerate((data[:2], data)):
            image = root.create_group(str(series))
            image.attrs["multiscales"] = [{"version": "0.4", "axes": ["t", "y", "x"], "datasets": [{"path": "0"}]}]
            image.create_array("0", shape=frames.shape, dtype=frames.dtype)[:] = frames
        return tmp_path / "b2r.zarr", {"series": 1}, data


class TestZarrGroupKey(StackReaderContract):
    """A plain (v2) group with several arrays: key= picks one."""

    backend = "zarr"

    def make(self, tmp_path):
        data = movie()
        group = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=2)
        group.create_array("raw", shape=data.shape, dtype=data.dtype)[:] = data
        group.create_array("other", shape=(2, 4, 4), dtype="uint8")
        return tmp_path / "g.zarr", {"key": "raw"}, data


class TestNpy(StackReaderContract):
    backend = "npy"

    def make(self, tmp_path):
        data = movie(dtype="float32")
        np.save(tmp_path / "m.npy", data)
        return tmp_path / "m.npy", {}, data


class TestNpyNamedAxes(StackReaderContract):
    """An unlabelled 4-D array becomes a stack once axes= names the dimensions."""

    backend = "npy"

    def make(self, tmp_path):
        data = movie((T, 3, H, W))
        np.save(tmp_path / "m.npy", data)
        return tmp_path / "m.npy", {"axes": "TCYX", "channel": 2}, data[:, 2]


class TestSingleImageTiff(StackReaderContract):
    """A single 2-D image is a 1-frame stack."""

    backend = "memmap"

    def make(self, tmp_path):
        data = movie((1, H, W))
        tifffile.imwrite(tmp_path / "one.tif", data[0])
        return tmp_path / "one.tif", {}, data


class TestSingleImageNpy(StackReaderContract):
    backend = "npy"

    def make(self, tmp_path):
        data = movie((1, H, W), dtype="uint8")
        np.save(tmp_path / "one.npy", data[0])
        return tmp_path / "one.npy", {}, data


class TestRgbTiffChannel(StackReaderContract):
    """An RGB movie: channel= picks one sample."""

    backend = "memmap"

    def make(self, tmp_path):
        data = movie((T, H, W, 3), dtype="uint8")
        tifffile.imwrite(tmp_path / "rgb.tif", data, photometric="rgb")
        return tmp_path / "rgb.tif", {"channel": 2}, data[..., 2]
