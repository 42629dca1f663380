"""``model.trained``: what a run keeps of a checkpoint gives the model back without its weights (``KnownNetwork``),
the same metadata and network facts, and anything else asked of the network loads it."""

from __future__ import annotations

from pathlib import Path

from decode_mem.model import engine
from decode_mem.model.checkpoint import load_model
from decode_mem.model.trained import KnownNetwork, file_sha256, is_network, remember_model, remembered_model

MODEL = Path(__file__).resolve().parents[2] / "data" / "models" / "default_2d.pt"


def test_a_kept_model_is_the_loaded_one_until_its_weights_are_needed(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "throughput.json"))
    sha = file_sha256(MODEL)
    loads = []

    def load(path: Path):
        loads.append(path)
        return load_model(path).net

    assert remembered_model(MODEL, sha, load) is None  # nothing kept yet
    model = load_model(MODEL)
    remember_model(model, sha)
    known = remembered_model(MODEL, sha, load)
    assert isinstance(known.net, KnownNetwork) and is_network(known.net) and not loads
    assert known.net.config == model.net.config and known.camera == model.camera
    assert (known.simulation, known.envelope, known.step, known.receptive_field) == \
        (model.simulation, model.envelope, model.step, model.receptive_field)
    assert known.net.receptive_field() == model.net.receptive_field()
    assert known.net.level_stride(256, 256) == model.net.level_stride(256, 256)
    assert engine.network_digest(known.net) == engine.network_digest(model.net) and not loads
    assert remembered_model(MODEL, "0" * 64, load) is None  # another file
    assert known.net.state_dict().keys() == model.net.state_dict().keys() and loads == [MODEL]  # loaded on demand


def test_a_kept_models_network_converts_for_each_runtime(tmp_path, monkeypatch) -> None:
    """A model first run on torch is kept without converted copies; a later run's runtime converts the
    ``KnownNetwork``: it is loaded before the trace, and the runtime gives torch's output (loaded inside the trace,
    every conversion failed and ``auto`` fell back to torch on that machine for good)."""
    import numpy as np
    import pytest
    import torch

    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "throughput.json"))
    model = load_model(MODEL)
    remember_model(model, file_sha256(MODEL))
    x = torch.from_numpy(np.random.default_rng(0).normal(0.0, 1.0, (1, model.net.config.input_channels, 32, 32))
                         .astype(np.float32))
    with torch.no_grad():
        want = model.net.frame_features(x)
    for name in ("onnxruntime", "openvino"):
        if not engine.installed(name):
            pytest.skip(f"{name} not installed (the optional 'cpu' extra)")
        known = remembered_model(MODEL, file_sha256(MODEL), lambda p: load_model(p).net)
        assert isinstance(known.net, KnownNetwork)
        runtime = engine.load_engine(name, known.net, threads=1, cache_dir=tmp_path / name)
        got = runtime.frame_features(x)
        # fp32 runtimes: ~1e-6 from torch on features up to ~2 (the 2-core AMD EPYC); a network made afresh, not
        # the checkpoint's, differs by far more than 1e-3
        assert np.abs(want.numpy()).max() > 0.1
        assert np.abs(np.asarray(got) - want.numpy()).max() <= 1e-3, name
