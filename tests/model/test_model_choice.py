"""The shipped model by device (``decode_mem.model.choice``): the wide one on a GPU, the small one on a CPU; the
choice and why in ``<stem>.json`` and ``fit.json``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tifffile

from decode_mem.model.checkpoint import SHIPPED_MODEL, load_model
from decode_mem.model.choice import SHIPPED_WIDE_MODEL, choose_model


def test_a_gpu_gets_the_wide_model_a_cpu_the_small_one(tmp_path: Path) -> None:
    wide = tmp_path / "default_2d_wide.pt"
    wide.write_bytes(b"stand-in")  # only its presence matters to the choice
    gpu = choose_model(None, "cuda", wide=wide)
    assert gpu.path == wide and "GPU" in gpu.why and not gpu.given
    cpu = choose_model(None, "cpu", wide=wide)
    assert cpu.path == SHIPPED_MODEL and "CPU" in cpu.why


def test_without_a_shipped_wide_model_a_gpu_says_so_and_gets_the_small_one(tmp_path: Path) -> None:
    choice = choose_model(None, "cuda", wide=tmp_path / "default_2d_wide.pt")
    assert choice.path == SHIPPED_MODEL and "default_2d_wide.pt missing" in choice.why


def test_a_given_model_is_used_on_any_device(tmp_path: Path) -> None:
    for device in ("cpu", "cuda"):
        choice = choose_model(tmp_path / "mine.pt", device)
        assert choice.path == tmp_path / "mine.pt" and choice.given
        assert choice.as_dict() == {"path": str(tmp_path / "mine.pt"), "given": True, "why": "given (--model)"}


def test_infer_config_chooses_by_its_device(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import decode_mem.infer.config as infer_config
    from decode_mem.infer.config import InferConfig

    wide = tmp_path / "default_2d_wide.pt"
    wide.write_bytes(b"stand-in")
    monkeypatch.setattr(infer_config, "device_type", lambda name: "cuda")
    monkeypatch.setattr(infer_config, "choose_model",
                        lambda given, device_type: choose_model(given, device_type, wide=wide))
    cfg = InferConfig(inputs=(str(tmp_path),), out=str(tmp_path / "out"))
    assert cfg.model_path == wide and "GPU" in cfg.model_choice.why


def test_infer_records_the_choice_in_the_stack_json(tmp_path: Path) -> None:
    from decode_mem.infer import run_inference
    from decode_mem.infer.config import InferConfig

    frames = np.random.default_rng(0).poisson(30.0, (6, 32, 32)).astype(np.uint16) + 100
    tifffile.imwrite(tmp_path / "m.tif", frames)
    run_inference(InferConfig(inputs=(str(tmp_path / "m.tif"),), out=str(tmp_path / "out"), device="cpu",
                              chunk_size=32, batch_size=2))
    summary = json.loads((tmp_path / "out" / "m.json").read_text())
    assert summary["model_choice"]["path"] == str(SHIPPED_MODEL) and "CPU" in summary["model_choice"]["why"]


@pytest.mark.parametrize("path", [SHIPPED_MODEL, SHIPPED_WIDE_MODEL, SHIPPED_MODEL.with_name("default_2d_light.pt")],
                         ids=["small", "wide", "light"])
def test_each_shipped_model_loads_and_localizes_the_sample_stack(path: Path) -> None:
    from decode_mem.infer.predict import predict_stack

    if not path.is_file():
        pytest.skip(f"{path.name} is not shipped")
    from decode_mem.evaluate import evaluate
    from decode_mem.io.localizations import read_localizations
    from decode_mem.io.table import EmitterTable

    model = load_model(path)
    sample = SHIPPED_MODEL.parents[1] / "sample"
    frames = tifffile.imread(sample / "stack.tif")[:8]
    found = EmitterTable.concat(predict_stack(frames, model, device="cpu", chunk_size=64, batch_size=4))
    gt = read_localizations(sample / "gt.csv", pixel_size=100.0)
    gt = gt.select(gt["frame"] < len(frames))
    m = evaluate(found, gt, pixel_size=100.0)
    # the bars of the whole sample's check (tests/inference/test_infer_outputs.py); the small model scores a
    # Jaccard of about 0.9 and ~15 nm on these 8 frames (352 true emitters); misplaced or missing ones fall far below
    assert len(gt) > 300 and m.jaccard > 0.7 and m.rmse_lat < 50.0, (m.jaccard, m.rmse_lat)
