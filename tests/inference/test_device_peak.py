"""``<stem>.json`` records the device memory a CUDA run really used beside the planner's prediction. The CUDA
calls are replaced by stand-ins recording what is asked of them (no GPU here); the gpu-marked infer run is the
real thing."""

from __future__ import annotations

import pytest
import torch

from decode_mem.infer import device_peak
from decode_mem.infer.device_peak import DevicePeak


def test_the_peak_is_reset_at_the_start_and_reported_above_the_weights(monkeypatch) -> None:
    calls: list[str] = []
    allocated = {"now": 30 * 2**20, "peak": 130 * 2**20}
    monkeypatch.setattr(device_peak, "cuda_in_use", lambda: 0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda i=None: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda i=None: calls.append(f"reset {i}"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda i=None: allocated["now"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda i=None: allocated["peak"])
    peak = DevicePeak().start()
    assert "reset 0" in calls
    row = peak.as_dict({"device": "cuda", "predicted_device_mib": 90.0})
    assert row["peak_mib"] == 130.0 and row["allocated_at_start_mib"] == 30.0
    assert row["peak_above_start_mib"] == 100.0 and row["error"] == pytest.approx(-0.1)
    assert peak.as_dict({"device": "cpu", "predicted_device_mib": 0.0}) is None  # a CPU run: nothing to report


def test_without_cuda_in_use_nothing_is_read(monkeypatch) -> None:
    monkeypatch.setattr(device_peak, "cuda_in_use", lambda: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda i=None: pytest.fail("CUDA touched"))
    assert DevicePeak().start().as_dict({"device": "cuda", "predicted_device_mib": 1.0}) is None


@pytest.mark.gpu
def test_a_cuda_run_records_its_measured_device_peak_beside_the_plan(shipped_model, sample_frames, tmp_path) -> None:
    import json

    import tifffile

    from decode_mem.infer.__main__ import main

    tifffile.imwrite(tmp_path / "m.tif", sample_frames[:16])
    assert main([str(tmp_path / "m.tif"), "--out", str(tmp_path / "out"), "--model", str(shipped_model),
                 "--device", "cuda", "--quiet"]) == 0
    sizes = json.loads((tmp_path / "out" / "m.json").read_text())["sizes"]
    measured = sizes["measured_device"]
    assert measured["predicted_mib"] == sizes["plan"]["predicted_device_mib"] > 0
    assert 0 < measured["peak_above_start_mib"] <= measured["peak_mib"]
    assert abs(measured["error"]) < 0.5  # the planner's device prediction against the allocator's own count
