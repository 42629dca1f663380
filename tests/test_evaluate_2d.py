"""A 2-D run (every z 0) has no axial measurement: its axial and volume RMSE, bias and efficiency are n/a (NaN),
never numbers (issue 46: a 2-D run printed axial RMSE 0.00 and efficiencies of 80 %); 3-D data keep them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from decode_mem.evaluate.metrics import evaluate
from decode_mem.io.table import EmitterTable


def _table(frame, x, y, z) -> EmitterTable:
    n = len(frame)
    return EmitterTable.from_arrays(frame=np.asarray(frame), x=np.asarray(x, np.float32),
                                    y=np.asarray(y, np.float32), z=np.full(n, z, np.float32),
                                    photons=np.full(n, 1000.0, np.float32))


def test_2d_axial_and_volume_metrics_are_not_numbers() -> None:
    gt = _table(np.arange(10) % 3, np.arange(10) * 3.0, np.full(10, 5.0), 0.0)
    pred = _table(gt["frame"], gt["x"] + 0.3, gt["y"] + 0.4, 0.0)  # 30, 40 nm off; no z
    m = evaluate(pred, gt, pixel_size=100.0)
    assert m.tp == 10 and m.rmse_lat == pytest.approx(50.0, rel=1e-5)
    assert m.efficiency_lat == pytest.approx(50.0, abs=1e-3)  # 100 - sqrt(0 + 50²)
    for name in ("rmse_ax", "rmse_vol", "bias_z", "efficiency_ax", "efficiency_vol"):
        assert math.isnan(getattr(m, name)), name
    rows = dict(m.rows())
    assert rows["RMSE lat / ax / vol"] == "50.00 / n/a / n/a nm"
    assert rows["efficiency lat / ax / vol"] == "50.00 / n/a / n/a %"


def test_3d_data_keep_their_axial_metrics() -> None:
    gt = _table(np.arange(10) % 3, np.arange(10) * 3.0, np.full(10, 5.0), 100.0)
    pred = _table(gt["frame"], gt["x"], gt["y"], 120.0)  # 20 nm off in z only
    m = evaluate(pred, gt, pixel_size=100.0)
    assert m.rmse_ax == pytest.approx(20.0, rel=1e-5) and m.rmse_vol == pytest.approx(20.0, rel=1e-5)
    assert m.efficiency_ax == pytest.approx(90.0, abs=1e-3) and not math.isnan(m.efficiency_vol)
