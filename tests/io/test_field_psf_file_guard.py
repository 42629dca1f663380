"""A field-dependent PSF file whose group claims a volume larger than the file holds is refused in one line before
anything is allocated, as a single PSF's coefficients are (``io.psf_file.checked_dataset``)."""

from __future__ import annotations

import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from decode_mem.errors import ConfigError
from decode_mem.io.field_psf_file import read_field_psf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "psf"))
from psf_helpers import grid_field_psf


def test_a_field_volume_claiming_more_than_the_file_is_refused(tmp_path) -> None:
    path = tmp_path / "field.h5"
    grid_field_psf(path, (80, 80), np.arange(-300.0, 301.0, 50.0), 8, [0.0, 40.0, 79.0], [0.0, 40.0, 79.0], 30.0,
                   (-200.0, 200.0), (-250.0, 250.0))
    assert read_field_psf(path) is not None
    with h5py.File(path, "r+") as f:  # an edited file: 'mean' replaced by a 4 GB one never written
        del f["field/mean"]
        f["field"].create_dataset("mean", shape=(1000, 1000, 1000), dtype="f4")
    with pytest.raises(ConfigError, match=r"field\.h5: the field-dependent PSF's 'mean' claims 4000000000 bytes"):
        read_field_psf(path)
