"""Sizes, counts and offsets a header claims are checked against what the file holds before anything is allocated or
looped over: a TIFF whose page directories loop, a CZI directory claiming more subblocks or planes than the file
holds, a MATLAB v7 array flagged complex without its imaginary part, a checkpoint whose model config describes a
network far larger than its weights (zarr stores: ``test_damage_budget.py``)."""

from __future__ import annotations

import struct
import time

import numpy as np
import pytest
import tifffile
import torch
from vendor_files import needs, write_czi

from decode_mem.errors import CheckpointError, StackError
from decode_mem.io import open_stack
from decode_mem.io.follow import FollowedStack, open_growing
from decode_mem.model.checkpoint import SHIPPED_MODEL, load_model


def frames(n: int = 6) -> np.ndarray:
    return np.random.default_rng(1).integers(100, 1000, (n, 8, 8)).astype("uint16")


def test_a_page_appended_tiff_whose_directories_loop_ends_at_the_loop(tmp_path):
    """The last page's next-directory offset points back to the second page's: the pages were walked for ever."""
    path = tmp_path / "pages.tif"
    for frame in frames():
        tifffile.imwrite(path, frame, append=True)
    with tifffile.TiffFile(path) as tif:
        offsets = [page.offset for page in tif.pages]
    data = bytearray(path.read_bytes())
    entries = struct.unpack_from("<H", data, offsets[-1])[0]
    struct.pack_into("<I", data, offsets[-1] + 2 + 12 * entries, offsets[1])
    path.write_bytes(bytes(data))
    start = time.monotonic()
    with open_stack(path) as stack:
        np.testing.assert_array_equal(stack[:], frames())
        assert "page directories loop back after page 5" in stack.notes()[0]
        assert not stack.damage.repaired_frames()
    with pytest.raises(StackError, match=r"pages\.tif: its page directories loop back to byte \d+"):
        FollowedStack(open_growing(path), idle_timeout=0.0).wait_for(100)
    assert time.monotonic() - start < 10


@needs("czi")
def test_a_czi_directory_that_claims_two_million_channels_is_one_line(tmp_path):
    """A subblock placed at channel 1 999 999: libCZI's bounding box then has 2 million channels, each of which was
    asked for its pixel type (a hang); every plane needs a subblock, and there are 6."""
    path = tmp_path / "m.czi"
    write_czi(path, frames())
    data = bytearray(path.read_bytes())
    entry = struct.unpack_from("<q", data, 84)[0] + 160  # the ZISRAWFILE header's directory position; its first DV
    dims = struct.unpack_from("<i", data, entry + 28)[0]
    channel = next(entry + 32 + 20 * k for k in range(dims) if data[entry + 32 + 20 * k] == ord("C"))
    struct.pack_into("<i", data, channel + 4, 1_999_999)
    path.write_bytes(bytes(data))
    start = time.monotonic()
    with pytest.raises(StackError) as err:
        open_stack(path)
    assert time.monotonic() - start < 10
    assert str(err.value).startswith(str(path)) and "directory lists 6 subblocks" in str(err.value)


def test_a_checkpoint_asking_for_a_vast_network_is_refused_before_it_is_built(tmp_path):
    state = torch.load(SHIPPED_MODEL, weights_only=True)
    state["model_config"] = {**state["model_config"], "features": 10**6}  # ~8.5e14 weights: petabytes
    torch.save(state, tmp_path / "vast.pt")
    start = time.monotonic()
    with pytest.raises(CheckpointError) as err:
        load_model(tmp_path / "vast.pt")
    assert time.monotonic() - start < 30
    text = str(err.value)
    assert text.startswith(str(tmp_path / "vast.pt")) and "\n" not in text
    assert "features 1000000" in text and "the file holds 235162" in text
