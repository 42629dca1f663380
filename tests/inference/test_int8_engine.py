"""The int8 engine (``--engine openvino-int8``; ``decode_mem.model.int8``): close to torch's fp32 output and unbiased
through the tiled executor, the same emitters within a few nm, quantized once and read back, refused without the
training physics to calibrate on; its correction fit recovers a known map ('auto' and int8:
test_auto_int8.py). Needs the ``cpu``
extra (OpenVINO and NNCF): those tests skip, saying so, where it is not installed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from infer_helpers import executor_outputs
from scipy.spatial import cKDTree

from decode_mem.errors import ConfigError
from decode_mem.footprint import engines as engine_choice
from decode_mem.footprint import request
from decode_mem.infer import predict_stack
from decode_mem.io.table import EmitterTable
from decode_mem.model import engine as engines
from decode_mem.model import int8
from decode_mem.model.checkpoint import load_model
from decode_mem.model.config import CHANNEL_INDEX, N_OUTPUT_CHANNELS

INT8 = "openvino-int8"


def _needs_int8() -> None:
    if not engines.installed(INT8):
        pytest.skip("openvino and nncf not installed (the optional 'cpu' extra: pip install -e \".[cpu]\")")


@pytest.fixture(scope="module")
def quantized(shipped_model):
    """(model, int8 engine, its cache folder): quantized once, where ``infer`` keeps it (the session's cache), so
    that ``predict_stack`` below reads it instead of quantizing again."""
    _needs_int8()
    model = load_model(str(shipped_model))
    cache = engine_choice.converted_dir()
    eng = engines.load_engine(INT8, model.net.eval(), threads=2, cache_dir=cache, simulation=model.simulation)
    return model, eng, cache


def _outputs(model, frames: np.ndarray, engine=None) -> torch.Tensor:
    """The executor's (tile, frame) outputs, stacked in a fixed order."""
    out = executor_outputs(model, frames, engine)
    return torch.stack([out[k] for k in sorted(out)])


def test_int8_stays_close_to_fp32_without_a_bias(quantized, sample_frames) -> None:
    """Where an emitter is detected: positions within int8's rounding noise (RMS < 0.03 px, 3 nm at 100 nm px) and
    no systematic shift (|mean| < 0.004 px), photon counts unbiased within 1 % (int8 without the correction read
    them 1–3 % low in the exploration), the same detections."""
    model, eng, _ = quantized
    frames = np.tile(sample_frames[:9], (1, 2, 2)).astype(np.float32)
    ref, got = _outputs(model, frames), _outputs(model, frames, eng)
    det = torch.sigmoid(ref[:, CHANNEL_INDEX["p_logit"]]) > 0.5
    assert int(det.sum()) >= 30
    for name in ("dx", "dy"):
        d = (got[:, CHANNEL_INDEX[name]] - ref[:, CHANNEL_INDEX[name]])[det]
        assert float(d.pow(2).mean().sqrt()) < 0.03 and abs(float(d.mean())) < 0.004, (name, d.mean(), d.std())
    ratio = (got[:, CHANNEL_INDEX["photons"]] / ref[:, CHANNEL_INDEX["photons"]])[det]
    assert abs(float(ratio.mean()) - 1) < 0.01, float(ratio.mean())
    both = det & (torch.sigmoid(got[:, CHANNEL_INDEX["p_logit"]]) > 0.5)
    assert int(both.sum()) >= 0.95 * int(det.sum())


def test_predict_stack_with_int8_finds_the_torch_emitters_within_a_few_nm(quantized, sample_frames) -> None:
    model = quantized[0]
    runs = {}
    for engine in ("torch", INT8):
        runs[engine] = EmitterTable.concat(predict_stack(sample_frames[:10], model, chunk_size=64, batch_size=2,
                                                         amp="off", device="cpu", engine=engine))
    a, b = (np.column_stack([np.asarray(t["frame"], float) * 1e6, np.asarray(t["x"]), np.asarray(t["y"])])
            for t in (runs["torch"], runs[INT8]))
    dist = cKDTree(b).query(a, distance_upper_bound=0.5)[0]
    matched = np.isfinite(dist)
    assert len(a) >= 20 and matched.sum() >= 0.97 * max(len(a), len(b)), (len(a), len(b), int(matched.sum()))
    assert float(np.sqrt(np.mean(dist[matched] ** 2))) < 0.03  # px


def test_int8_is_quantized_once_and_read_back(quantized, shipped_model) -> None:
    model, eng, cache = quantized
    # this model's (another test of the session may have quantized another shipped model there)
    folder = engines.cache_folder(cache, INT8, model.net, engines.physics_key(model.simulation))
    assert folder in [p for p in cache.iterdir() if p.name.startswith(INT8)] and "nncf" in folder.name
    assert (folder / "correction.json").is_file() and (folder / "temporal_raw.xml").is_file()
    stamps = {p: p.stat().st_mtime_ns for p in folder.iterdir() if p.is_file()}
    again = engines.load_engine(INT8, model.net, threads=2, cache_dir=cache, simulation=model.simulation)
    assert {p: p.stat().st_mtime_ns for p in folder.iterdir() if p.is_file()} == stamps  # read, not rewritten
    assert np.array_equal(again.correction, eng.correction) and eng.precision == "int8"
    x = torch.randn(2, model.net.config.input_channels, 32, 32, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again.frame_features(x), eng.frame_features(x))
    other = dict(model.simulation, density=2 * float(model.simulation.get("density") or 1))
    assert engines.cache_folder(cache, INT8, model.net, engines.physics_key(other)) != folder  # calibrated apart


def test_the_first_int8_run_says_that_it_quantizes_and_a_later_one_does_not(quantized, shipped_model, monkeypatch,
                                                                            tmp_path) -> None:
    """The first run on a machine quantizes before its first block (tens of seconds without a word before):
    infer says so, once, and where later runs read the result; a run that finds it there says nothing."""
    from decode_mem.infer import InferConfig
    from decode_mem.infer.observe import InferObserver
    from decode_mem.infer.runner import _say_choices

    model, _, cache = quantized
    said: list[str] = []

    class Lines(InferObserver):
        def message(self, line: str) -> None:
            said.append(line)

    cfg = InferConfig(inputs=("movie.tif",), out=str(tmp_path / "locs"), model=str(shipped_model), engine=INT8)
    assert engines.int8_kept(model.net, cache, model.simulation)
    _say_choices(cfg, model, Lines())
    assert said == []  # quantized by the fixture, where infer looks
    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "fresh" / "throughput.json"))  # another machine's cache
    assert not engines.int8_kept(model.net, engine_choice.converted_dir(), model.simulation)
    _say_choices(cfg, model, Lines())
    assert len(said) == 1 and said[0].startswith("engine openvino-int8: quantizing the network to int8")
    assert str(tmp_path / "fresh" / "engines") in said[0] and "later runs" in said[0]


def test_int8_needs_the_training_physics_to_calibrate_on(shipped_model) -> None:
    _needs_int8()
    net = load_model(str(shipped_model)).net
    with pytest.raises(ConfigError, match="no training physics"):
        engines.load_engine(INT8, net, threads=1)
    with pytest.raises(ConfigError, match="no training physics"):  # a bare network, not a checkpoint
        next(predict_stack(np.zeros((4, 32, 32), np.float32), net, device="cpu", engine=INT8))


def test_a_missing_nncf_is_named(monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nncf" else real(name, *a))
    assert request.missing_runtime(INT8) == "nncf"
    assert not engines.installed(INT8)
    with pytest.raises(engines.EngineUnavailable, match=r"engine openvino-int8: nncf not installed"):
        engines.load_engine(INT8, None, simulation={"x": 1})


def test_the_runtime_tables_agree() -> None:
    assert request.RUNTIME_MODULES == engines.RUNTIME_MODULES


def test_the_correction_fit_recovers_a_known_map() -> None:
    """``fit_correction`` on outputs made from the float ones by a known per-channel ``(raw - b) / a``: it gives
    back ``(a, b)`` on the channels' own pixels; a channel without spread keeps (1, 0)."""
    gen = torch.Generator().manual_seed(0)
    raw = torch.randn(8, N_OUTPUT_CHANNELS, 16, 16, generator=gen)
    raw[:, CHANNEL_INDEX["p_logit"]] = torch.where(torch.rand(8, 16, 16, generator=gen) < 0.3, 3.0, -6.0)
    raw[:, CHANNEL_INDEX["z"]] = 0.0
    a = 1 + 0.05 * torch.arange(N_OUTPUT_CHANNELS, dtype=torch.float32)
    b = 0.1 * torch.arange(N_OUTPUT_CHANNELS, dtype=torch.float32) - 0.3
    quantized = (raw - b.view(1, -1, 1, 1)) / a.view(1, -1, 1, 1)
    quantized[:, CHANNEL_INDEX["p_logit"]] = raw[:, CHANNEL_INDEX["p_logit"]]  # the logit: identity
    coef = int8.fit_correction(raw, quantized)
    for ch in range(N_OUTPUT_CHANNELS):
        if ch == CHANNEL_INDEX["z"]:
            assert coef[ch].tolist() == [1.0, 0.0]
        elif ch == CHANNEL_INDEX["p_logit"]:
            assert coef[ch] == pytest.approx([1.0, 0.0], abs=1e-6)
        else:
            assert coef[ch] == pytest.approx([float(a[ch]), float(b[ch])], abs=1e-4), ch


def test_the_quantizing_child_declines_nncf_and_openvino_telemetry(monkeypatch, tmp_path) -> None:
    """NNCF and OpenVINO send usage telemetry from a quantization unless ``CI`` is 'true' (``openvino_telemetry``'s
    ``disable_in_ci``): the child that quantizes for the user runs with it."""
    import os
    import subprocess

    seen = {}

    def run(args, **kwargs):
        seen.update(kwargs)
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(int8.subprocess, "run", run)
    net = torch.nn.Linear(1, 1)
    net.config = None
    int8.write_in_child(net, {}, tmp_path, 1)
    assert seen["env"]["CI"] == "true" and seen["env"].get("PATH") == os.environ.get("PATH")  # the rest as it is
