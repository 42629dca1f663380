"""A field-dependent PSF file whose group claims a volume larger than the file holds is refused in one line before
anything is allocated, as a single PSF's coefficients are (``io.psf_file.checked_dataset``)."""

from __future__ import annotations

import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from decode_mem.errors import ConfigError
from decode_mem.io.field_psf_file import FieldPsfData, read_field_psf, write_field_psf
from decode_mem.simulate.field_spline import FieldSplinePSF

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "psf"))
from psf_helpers import analytic_volume


def test_a_field_volume_claiming_more_than_the_file_is_refused(tmp_path) -> None:
    z = np.arange(-300.0, 301.0, 50.0)
    mean = analytic_volume(z, 8, 2)
    g = np.array([0.0, 40.0, 79.0])
    gx, gy = np.meshgrid(g, g)
    data = FieldPsfData(field_shape=(80, 80), mean=mean, components=np.gradient(mean, axis=1)[None],
                        bead_xy=np.column_stack([gx.ravel(), gy.ravel()]),
                        bead_weights=np.linspace(-0.3, 0.3, 9)[:, None], bead_shift=np.linspace(-30, 30, 9),
                        x0=16.0, y0=16.0, z0=6.0, dz=50.0, upsample=2, z_range=(-200.0, 200.0),
                        shape_range=(-250.0, 250.0), pixel_size=100.0)
    path = tmp_path / "field.h5"
    write_field_psf(path, FieldSplinePSF(data).data, data)
    assert read_field_psf(path) is not None
    with h5py.File(path, "r+") as f:  # an edited file: 'mean' replaced by a 4 GB one never written
        del f["field/mean"]
        f["field"].create_dataset("mean", shape=(1000, 1000, 1000), dtype="f4")
    with pytest.raises(ConfigError, match=r"field\.h5: the field-dependent PSF's 'mean' claims 4000000000 bytes"):
        read_field_psf(path)
