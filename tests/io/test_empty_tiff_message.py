"""A 0-frame TIFF and a 0-frame zarr are one kind of bad input, said one way: 'empty stack' with the shape
(issue 46: the TIFF said 'cannot read the TIFF structure (ZeroDivisionError ...)')."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

from decode_mem.errors import EmptyStackError
from decode_mem.io import open_stack


def test_zero_frame_tiff_and_zarr_say_empty_stack(tmp_path: Path) -> None:
    tif, arr = tmp_path / "empty.tif", tmp_path / "empty.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tifffile: 'writing zero-size array to nonconformant TIFF'
        tifffile.imwrite(tif, np.zeros((0, 16, 16), np.uint16))
    zarr.create_array(str(arr), shape=(0, 16, 16), dtype="uint16")
    messages = []
    for path in (tif, arr):
        with pytest.raises(EmptyStackError) as info:
            open_stack(path)
        messages.append(str(info.value))
    assert messages == [f"{tif}: empty stack, the data have shape (0, 16, 16)",
                        f"{arr}: empty stack, the data have shape (0, 16, 16)"]
