"""Microscope files for the tests: the real samples in tests/data/vendor (each folder's README gives its source and
licence) and writers that make CZI and NDTiff files with the vendors' own libraries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from decode_mem.io import formats

VENDOR = Path(__file__).resolve().parent / "data" / "vendor"
SIF = VENDOR / "sif" / "test_multiframe.sif"
SIF_BINNED = VENDOR / "sif" / "issue27_test.sif"
ND2 = VENDOR / "nd2" / "example-timelapse.nd2"
LIF = VENDOR / "lif" / "LeicaLASX_wavelength-sweep_example.lif"
CZI = VENDOR / "czi" / "LLS7_small.czi"
NDTIFF = VENDOR / "ndtiff" / "ndtiff3.2_11bit_1"
NDTIFF_CHANNELS = VENDOR / "ndtiff" / "12_bit_pycromanager_mda"


def needs(key: str):
    """Skip where the library of a format (the 'formats' extra) is not installed."""
    return pytest.mark.skipif(not formats.FORMATS[key].available(),
                              reason=f"the '{formats.EXTRA}' extra is not installed")


def write_czi(path: Path, frames: np.ndarray, *, scenes: int = 1, pixel_um: float = 0.1) -> None:
    """A CZI file written by Zeiss's libCZI (pylibCZIrw): frames along T, one scene per copy, side by side."""
    from pylibCZIrw import czi as pyczi

    with pyczi.create_czi(str(path), exist_ok=True) as czi:
        for s in range(scenes):
            for t, frame in enumerate(frames):
                czi.write(frame + s, plane={"T": t, "Z": 0, "C": 0}, scene=s,
                          location=(s * (frame.shape[1] + 16), 0))
        czi.write_metadata(scale_x=pixel_um, scale_y=pixel_um)


def write_ndtiff(folder: Path, frames: np.ndarray, image_metadata: dict | None = None, flush: bool = True) -> Path:
    """An NDTiff dataset written by Micro-Manager's ndtiff library, one image per time point; each image and index
    entry flushed as it is written (as Micro-Manager's own writer does: a dataset being written)."""
    from ndtiff import NDTiffDataset

    ds = NDTiffDataset(str(folder), name="acq", writable=True, summary_metadata={"Prefix": "acq"})
    for t, frame in enumerate(frames):
        ds.put_image({"time": t}, frame, dict(image_metadata or {}))
        if flush:
            ds.current_writer.file.flush()
            ds._index_file.flush()
    ds.finish()
    ds.close()
    return next(p for p in folder.iterdir() if p.is_dir())
