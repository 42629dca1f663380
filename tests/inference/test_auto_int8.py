"""'auto', the command line's default engine, takes int8 only where int8's check against fp32 passed for the model
(``decode_mem.infer.int8_check``): the check passes the shipped model and fails an int8 build planted to move
photon counts; its verdict is kept beside the quantized model and read back; a failed verdict keeps 'auto' on a
float engine and the reason says why; where 'auto' takes int8 its emitters are those of ``--engine openvino-int8``;
the command says its choice once and, on its first run, that it quantizes and checks. Needs the ``cpu`` extra
(OpenVINO and NNCF): those tests skip, saying so, where it is not installed."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from decode_mem.footprint import engines as engine_choice
from decode_mem.infer import int8_check as check
from decode_mem.infer import predict_stack
from decode_mem.io.table import EmitterTable
from decode_mem.model import engine as engines
from decode_mem.model.checkpoint import load_model
from decode_mem.model.config import CHANNEL_INDEX

INT8 = "openvino-int8"
SIZES = {"chunk_size": 64, "batch_size": 2, "amp": "off", "device": "cpu"}


def _needs_int8() -> None:
    if not engines.installed(INT8):
        pytest.skip("openvino and nncf not installed (the optional 'cpu' extra: pip install -e \".[cpu]\")")


@pytest.fixture(scope="module")
def verified(shipped_model):
    """(model, its int8 verdict in fp32, its int8 folder): quantized (where no other test did yet) and checked once,
    where infer keeps them (the session's cache)."""
    _needs_int8()
    model = load_model(str(shipped_model))
    net = model.net.eval()
    verdict = check.int8_verdict(net, model.simulation, threads=2)
    return model, verdict, engines.int8_folder(engine_choice.converted_dir(), net, model.simulation)


def _fresh_cache(monkeypatch, tmp_path, folder, verdicts: bool = True):
    """A cache of its own holding a copy of the quantized model (and its verdicts, unless ``verdicts`` is False):
    what is planted there does not reach the other tests."""
    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "cache" / "throughput.json"))
    copy = engine_choice.converted_dir() / folder.name
    shutil.copytree(folder, copy, ignore=None if verdicts else shutil.ignore_patterns("verdict-*"))
    return copy


def test_the_check_passes_the_shipped_model_and_its_verdict_is_kept(verified) -> None:
    model, verdict, folder = verified
    assert verdict.passed and not verdict.failed, verdict.line()
    n = verdict.numbers
    assert n["n_truth"] > 5000 and n["windows"] == check.CHECK_WINDOWS
    assert 0.5 < n["jaccard_fp32"] <= 1 and n["jaccard_loss"] <= check.TOLERANCE.jaccard
    kept = json.loads(check.verdict_path(folder, "fp32").read_text())
    assert kept["passed"] is True and kept["check"] == check.CHECK_KEY and kept["numbers"] == pytest.approx(n)
    assert check.kept_verdict(model.net, model.simulation, "fp32") == verdict  # read back, not checked again
    assert verdict.line().startswith("int8 verified against fp32 (Jaccard ")


def test_the_check_fails_an_int8_build_that_moves_photon_counts(verified, monkeypatch, tmp_path) -> None:
    """Planted: the int8 build's correction of the photon channel shifted (its raw value +0.3, about +20-30 % of the
    photons): the check, made anew (no verdict in this cache), fails on the photon bias, says so, and keeps that
    verdict; the positions and the Jaccard are untouched, so only that number fails."""
    model, _, folder = verified
    copy = _fresh_cache(monkeypatch, tmp_path, folder, verdicts=False)
    saved = json.loads((copy / "correction.json").read_text())
    saved["b"][CHANNEL_INDEX["photons"]] += 0.3
    (copy / "correction.json").write_text(json.dumps(saved))
    assert check.kept_verdict(model.net, model.simulation, "fp32") is None
    verdict = check.int8_verdict(model.net, model.simulation, threads=2)
    assert not verdict.passed and len(verdict.failed) == 1 and verdict.failed[0].startswith("photon bias ")
    assert verdict.numbers["photons_bias"] > 0.1
    assert verdict.line().startswith("int8 failed its check against fp32: photon bias")
    assert check.kept_verdict(model.net, model.simulation, "fp32") == verdict


def _auto(model, frames, chosen: list) -> EmitterTable:
    return EmitterTable.concat(predict_stack(frames, model, engine="auto", on_plan=chosen.append, **SIZES))


def _plant_int8_fastest(path) -> None:
    """Every remembered runtime timing of the unit: int8 the fastest by far, the others as slow as the slowest."""
    table = json.loads(path.read_text())
    torch_s = max(table.values())
    path.write_text(json.dumps({k: 1e-3 * torch_s if f"|{INT8} " in k else torch_s for k in table}))


def test_auto_takes_int8_only_where_its_check_passed(verified, monkeypatch, tmp_path, sample_frames) -> None:
    """With int8 planted as the fastest engine: a passed verdict lets 'auto' take it, with the very emitters of
    the explicit engine; a planted failed verdict keeps it on a float engine, and its reason says why."""
    model, verdict, folder = verified
    copy = _fresh_cache(monkeypatch, tmp_path, folder)
    frames = sample_frames[:6]
    chosen: list = []
    _auto(model, frames, chosen)  # times every engine once, remembering the timings in this cache
    timings = engine_choice.engines_path()
    assert any(f"|{INT8} " in k for k in json.loads(timings.read_text()))  # verified: timed beside the others
    _plant_int8_fastest(timings)
    chosen.clear()
    got = _auto(model, frames, chosen)
    assert chosen[0].engine.startswith(f"auto: {INT8} (int8)") and "int8 verified against fp32" in chosen[0].engine
    explicit = EmitterTable.concat(predict_stack(frames, model, engine=INT8, **SIZES))
    assert len(got) > 50
    for column in ("frame", "x", "y", "photons", "prob"):
        assert np.array_equal(np.asarray(got[column]), np.asarray(explicit[column])), column

    failed = dict(verdict.as_json(), passed=False, failed=["photon bias 12.0% > 2.0%"])  # planted: a failed check
    check.verdict_path(copy, "fp32").write_text(json.dumps(failed))
    chosen.clear()
    _auto(model, frames, chosen)
    why = chosen[0].engine
    assert not why.startswith(f"auto: {INT8}") and "int8 failed its check against fp32: photon bias 12.0%" in why
    assert "\n" not in why


def test_auto_does_not_consider_int8_without_a_check(verified, monkeypatch) -> None:
    """No check to ask (a bare network: no training physics) or no int8 installed: int8 is neither checked nor
    loaded, even planted as the fastest."""
    model = verified[0]
    loaded, asked = [], []

    class Fake:
        def __init__(self, name):
            self.name, self.precision = name, "fp32"

    monkeypatch.setattr(engine_choice, "load_engine", lambda name, *a, **k: loaded.append(name) or Fake(name))
    monkeypatch.setattr(engine_choice, "engine_key", lambda net, plan, dev, name, n: name)
    monkeypatch.setattr(engine_choice, "_load", lambda: {"torch": 1.0, "openvino": 0.5, "onnxruntime": 0.8, INT8: 0.1})
    cpu = torch.device("cpu")
    choice = engine_choice.choose_engine("auto", model.net, plan=None, device=cpu, threads=1)
    assert choice.name == "openvino" and INT8 not in loaded and INT8 not in choice.why
    monkeypatch.setattr(engine_choice, "installed", lambda name: name != INT8)
    choice = engine_choice.choose_engine("auto", model.net, plan=None, device=cpu, threads=1,
                                         int8_check=lambda *a: asked.append(a) or verified[1])
    assert choice.name == "openvino" and not asked and INT8 not in loaded


@pytest.mark.parametrize(("openvino_s", "int8_s", "want", "tie"), [
    (0.5, 0.51, INT8, True), (0.5, 0.56, "openvino", False), (0.5, 0.40, INT8, False),
    (0.88, 0.92, "openvino", False)])  # int8 within 5 % of OpenVINO but not 10 % faster than torch: not taken
def test_auto_takes_the_least_memory_among_runtimes_within_five_percent(verified, monkeypatch, openvino_s, int8_s,
                                                                         want, tie) -> None:
    """Units are timed at torch's sizes: OpenVINO in bf16 and int8 came within 2 % of each other at 2048² while int8's
    whole command was 1.2x faster there; among runtimes within ``ENGINE_TIE`` of the fastest, 'auto' takes int8 (the
    smaller working set) and says so; a runtime more than that faster, or torch's margin, still decides."""
    model = verified[0]
    loaded = []

    class Fake:
        def __init__(self, name):
            self.name, self.precision = name, "int8" if name == INT8 else "fp32"

    monkeypatch.setattr(engine_choice, "installed", lambda name: True)
    monkeypatch.setattr(engine_choice, "load_engine", lambda name, *a, **k: loaded.append(name) or Fake(name))
    monkeypatch.setattr(engine_choice, "engine_key", lambda net, plan, dev, name, n: name)
    monkeypatch.setattr(engine_choice, "_load", lambda: {"torch": 1.0, "openvino": openvino_s, "onnxruntime": 0.95,
                                                         INT8: int8_s})
    choice = engine_choice.choose_engine("auto", model.net, plan=None, device=torch.device("cpu"), threads=1,
                                         int8_check=lambda *a: verified[1])
    assert choice.name == want and set(loaded) <= {want}  # every timing remembered: only the one taken is loaded
    assert ("within 5% of the fastest per unit of work" in choice.why) == tie, choice.why


def test_the_command_runs_auto_by_default_says_its_choice_once_and_its_first_check(
        verified, monkeypatch, tmp_path, capsys) -> None:
    """No --engine: 'auto'. Its first run on a machine says, before the first block, that it checks int8 (here
    quantized already; and where it keeps the verdict); a later run does not; each says the engine it chose once,
    for two stacks too."""
    import tifffile
    from infer_helpers import SAMPLE

    from decode_mem.infer.__main__ import main

    model, _, folder = verified
    movies = []
    for name in ("a", "b"):
        movies.append(tmp_path / f"{name}.tif")
        tifffile.imwrite(movies[-1], tifffile.imread(SAMPLE)[:6])
    _fresh_cache(monkeypatch, tmp_path, folder, verdicts=False)
    args = ["--model", str(model.path), "--device", "cpu", "--amp", "off", "--use_chunking", "--chunk_size", "64",
            "--batch_size", "2"]
    assert main([*map(str, movies), "--out", str(tmp_path / "first"), *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = [line for line in lines if line.startswith("engine auto: checking int8 against fp32 on windows simulated")]
    assert len(first) == 1 and str(engine_choice.converted_dir()) in first[0]
    said = [line for line in lines if line.startswith("engine auto: ") and line not in first]
    assert len(said) == 1 and "the fastest per unit of work on this machine" in said[0], said
    assert check.kept_verdict(model.net, model.simulation, "fp32") is not None
    assert main([str(movies[0]), "--out", str(tmp_path / "again"), *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("engine auto: ")] == said  # the same choice, said once


def test_auto_times_the_engines_taking_turns_and_keeps_each_ones_least_time(shipped_model) -> None:
    """A load spike while one engine is timed (planted: its first calls sleep 1 s) does not make it the slower one:
    the engines take turns, one unit each, and each keeps its least time (timed one after the other by their mean,
    the spiked engine came out slower)."""
    import itertools
    import time

    from decode_mem.footprint.request import SizeRequest
    from decode_mem.infer.predict import choose_for_stack

    model = load_model(str(shipped_model))
    net, cpu = model.net.eval(), torch.device("cpu")
    plan = choose_for_stack(net, (8, 64, 64), 2, cpu, SizeRequest(chunk_size=64, batch_size=2, amp="off")).plan
    order: list[str] = []

    class Delayed(engines.TorchEngine):
        name = "delayed"  # not 'torch': the executor calls the engine, not the modules

        def __init__(self, name: str, delays: list[float], then: float) -> None:
            super().__init__(net)
            self.label, self.delays, self.then = name, iter(delays), then

        def temporal(self, *features):
            order.append(self.label)
            time.sleep(next(self.delays, self.then))
            return super().temporal(*features)

    spiked, steady = Delayed("spiked", [0.0, 1.0, 1.0, 1.0], 0.02), Delayed("steady", [], 0.3)
    seconds = engine_choice.time_engines(net, plan, cpu, {"spiked": spiked, "steady": steady}, rounds=5)
    assert seconds["spiked"] + 0.1 < seconds["steady"], seconds
    timed = order[2:]  # after one warm-up call each
    assert len(timed) >= 10 and all(a != b for a, b in itertools.pairwise(timed)), order  # turns
