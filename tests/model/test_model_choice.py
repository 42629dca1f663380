"""The shipped model by device (``decode_mem.model.choice``): the wide one on a GPU; on a CPU the light one where its
verdict passes this very file, else the small one; the choice and why in ``<stem>.json`` and ``fit.json``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tifffile

from decode_mem.model.checkpoint import SHIPPED_MODEL, load_model
from decode_mem.model.choice import LIGHT_VERDICT, SHIPPED_LIGHT_MODEL, SHIPPED_WIDE_MODEL, choose_model
from decode_mem.model.trained import file_sha256


def test_a_gpu_gets_the_wide_model_a_cpu_the_small_one(tmp_path: Path) -> None:
    wide = tmp_path / "default_2d_wide.pt"
    wide.write_bytes(b"stand-in")  # only its presence matters to the choice
    gpu = choose_model(None, "cuda", wide=wide)
    assert gpu.path == wide and "GPU" in gpu.why and not gpu.given
    cpu = choose_model(None, "cpu", wide=wide, light_refused="a reason")
    assert cpu.path == SHIPPED_MODEL and "CPU" in cpu.why and "a reason" in cpu.why


def _light(tmp_path: Path, **verdict: object) -> tuple[Path, Path]:
    tmp_path.mkdir(exist_ok=True)
    light = tmp_path / "default_2d_light.pt"
    light.write_bytes(b"light stand-in")
    said = tmp_path / "default_2d_light_cpu.json"
    said.write_text(json.dumps({"sha256": file_sha256(light), **verdict}))
    return light, said


def test_a_cpu_takes_the_light_model_only_where_its_verdict_passes_this_very_file(tmp_path: Path) -> None:
    light, said = _light(tmp_path, cpu_default=True, summary="1.5x the small model's frames/s")
    choice = choose_model(None, "cpu", light=light, verdict=said)
    assert choice.path == light and "CPU" in choice.why and "1.5x the small model" in choice.why
    assert choose_model(None, "cuda", light=light, verdict=said).path != light  # a GPU: the wide or small one
    assert choose_model(tmp_path / "mine.pt", "cpu", light=light, verdict=said).given
    # a planted failing verdict keeps the small model, and says why
    failed, failed_said = _light(tmp_path / "failed", cpu_default=False, summary="-0.022 Jaccard against it")
    choice = choose_model(None, "cpu", light=failed, verdict=failed_said)
    assert choice.path == SHIPPED_MODEL and "-0.022 Jaccard" in choice.why
    # a verdict for another file (the light model retrained or replaced since it was measured)
    light.write_bytes(b"retrained")
    choice = choose_model(None, "cpu", light=light, verdict=said)
    assert choice.path == SHIPPED_MODEL and "written for another default_2d_light.pt" in choice.why
    # no verdict, an unreadable one, no light model
    said.write_text("{not json")
    assert "unreadable" in choose_model(None, "cpu", light=light, verdict=said).why
    assert "missing" in choose_model(None, "cpu", light=light, verdict=tmp_path / "none.json").why
    assert "not shipped" in choose_model(None, "cpu", light=tmp_path / "no.pt", verdict=said).why


def test_the_shipped_verdict_is_the_one_its_results_give() -> None:
    """``default_2d_light_cpu.json`` is what ``benchmarks/light_verdict.py`` computes from the committed results for
    the shipped files: nobody typed it."""
    if not LIGHT_VERDICT.is_file():
        pytest.skip("no verdict shipped: the light model is not the CPU default")
    import sys

    benchmarks = SHIPPED_MODEL.parents[2] / "benchmarks"
    sys.path.insert(0, str(benchmarks))
    try:
        from light_verdict import summary, verdict
    finally:
        sys.path.remove(str(benchmarks))
    said = json.loads(LIGHT_VERDICT.read_text())
    results = [json.loads((SHIPPED_MODEL.parents[2] / f).read_text()) for f in said["results"]]
    again = verdict(*results, file_sha256(SHIPPED_LIGHT_MODEL), file_sha256(SHIPPED_MODEL))
    assert {k: said[k] for k in again} == again
    assert said["summary"] == summary(again)


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
                        lambda given, device_type, **kw: choose_model(given, device_type, wide=wide, **kw))
    cfg = InferConfig(inputs=(str(tmp_path),), out=str(tmp_path / "out"))
    assert cfg.model_path == wide and "GPU" in cfg.model_choice.why


def test_ratiometric_dyes_never_get_the_light_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Dyes told apart by their photon counts: the light model's verdict did not check those, so a CPU run with
    ratiometric dyes takes the small one and says why, even where the verdict passes the light one."""
    from types import SimpleNamespace

    import decode_mem.infer.config as infer_config
    from decode_mem.infer.config import InferConfig

    light, said = _light(tmp_path, cpu_default=True, summary="passed")
    monkeypatch.setattr(infer_config, "device_type", lambda name: "cpu")
    monkeypatch.setattr(infer_config, "choose_model",
                        lambda given, device_type, **kw: choose_model(given, device_type, light=light, verdict=said,
                                                                      **kw))
    cfg = InferConfig(inputs=(str(tmp_path),), out=str(tmp_path / "out"))
    assert cfg.model_choice.path == light  # one colour: the light one
    object.__setattr__(cfg, "two_colour", SimpleNamespace(dyes=("A", "B")))  # a stand-in: only its dyes are read
    choice = cfg.model_choice
    assert choice.path == SHIPPED_MODEL and "ratiometric dyes" in choice.why
    object.__setattr__(cfg, "two_colour", SimpleNamespace(dyes=None))  # one dye per channel: positions only
    assert cfg.model_choice.path == light


def test_infer_records_the_choice_in_the_stack_json(tmp_path: Path) -> None:
    from decode_mem.infer import run_inference
    from decode_mem.infer.config import InferConfig

    frames = np.random.default_rng(0).poisson(30.0, (6, 32, 32)).astype(np.uint16) + 100
    tifffile.imwrite(tmp_path / "m.tif", frames)
    run_inference(InferConfig(inputs=(str(tmp_path / "m.tif"),), out=str(tmp_path / "out"), device="cpu",
                              chunk_size=32, batch_size=2))
    summary = json.loads((tmp_path / "out" / "m.json").read_text())
    expected = choose_model(None, "cpu")  # the light model or the small one, as the shipped verdict says
    assert summary["model_choice"] == expected.as_dict() and "CPU" in summary["model_choice"]["why"]


@pytest.mark.parametrize("path", [SHIPPED_MODEL, SHIPPED_WIDE_MODEL, SHIPPED_LIGHT_MODEL],
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
