"""CPU inference engines (``decode_mem.model.engine``, ``decode_mem.footprint.engines``): each runtime gives torch's
fp32 output within ``ENGINE_ATOL`` through the tiled executor (tiles, carried features) and the same emitters;
``auto`` falls back to torch with one warning when no runtime is installed or the runtime fails to load; an engine
asked for by name that is missing is a ConfigError. The runtimes come with the ``cpu`` extra: their tests skip,
saying so, where it is not installed (CI installs it: ``.ci/run``). int8: ``test_int8_engine.py``."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest
import torch
from cpu_flags import cpu_flags
from infer_helpers import executor_outputs
from numerics import assert_same_emitters

from decode_mem.errors import ConfigError
from decode_mem.footprint import engines as engine_choice
from decode_mem.footprint import request
from decode_mem.infer import predict_stack
from decode_mem.infer.predict import block_emitters
from decode_mem.io.table import EmitterTable
from decode_mem.model import engine as engines
from decode_mem.model.checkpoint import load_model
from decode_mem.postprocess import PostprocessConfig, detect_candidates
from decode_mem.tiling import ArrayStack, TiledExecutor
from decode_mem.tiling.config import TileConfig


def _needs(name: str) -> None:
    if not engines.installed(name):
        pytest.skip(f"{name} not installed (the optional 'cpu' extra: pip install -e \".[cpu]\")")


@pytest.mark.parametrize("name", ["openvino", "onnxruntime"])
def test_each_runtime_gives_the_fp32_torch_output_within_the_tolerance(name, shipped_model, sample_frames) -> None:
    _needs(name)
    frames = np.tile(sample_frames[:7], (1, 2, 2)).astype(np.float32)  # 128²: several tiles
    model = load_model(str(shipped_model))
    ref = executor_outputs(model, frames)
    got = executor_outputs(model, frames, engines.load_engine(name, model.net, threads=1))
    assert got.keys() == ref.keys() and len(ref) > 7 and len(ref) % 7 == 0
    diff = torch.stack([(got[k] - ref[k]).abs().amax(dim=(1, 2)) for k in ref]).amax(dim=0)
    assert (diff <= torch.tensor(engines.ENGINE_ATOL)).all(), f"{name}: max abs difference per channel {diff.tolist()}"


@pytest.mark.parametrize("name", ["openvino", "onnxruntime"])
def test_predict_stack_with_a_runtime_finds_the_torch_emitters(name, shipped_model, sample_frames) -> None:
    _needs(name)
    runs = {}
    for engine in ("torch", name):
        model = load_model(str(shipped_model))
        runs[engine] = EmitterTable.concat(predict_stack(sample_frames[:6], model, chunk_size=64, batch_size=2,
                                                         amp="off", device="cpu", engine=engine))
    assert_same_emitters(runs["torch"], runs[name], PostprocessConfig().threshold)


@pytest.mark.parametrize("maps", [False, True])
def test_a_runtime_that_takes_arrays_localizes_as_with_tensors(maps, monkeypatch, tmp_path, shipped_model,
                                                               sample_frames) -> None:
    """OpenVINO takes and returns numpy arrays: the executor's levels, staging, normalization (an sCMOS camera's
    per-pixel maps too), stitching and detection are then done on arrays (``TiledExecutor.arrays``,
    ``model.arrays``), without torch tensors. Its outputs equal the tensor path's with the same runtime within
    float32 rounding of the input (torch's square root is not numpy's), and the two find the same emitters."""
    _needs("openvino")
    model = load_model(str(shipped_model))
    frames = np.tile(sample_frames[:7], (1, 2, 2))  # raw ADU, 128²: several tiles
    camera = model.camera
    if maps:
        rng = np.random.default_rng(5)
        h, w = frames.shape[1:]
        for name, a in (("offset", rng.uniform(90, 110, (h, w))), ("gain", rng.uniform(0.4, 0.6, (h, w))),
                        ("var", rng.gamma(2.0, 2.0, (h, w)))):
            np.save(tmp_path / f"{name}.npy", a.astype(np.float32))
        camera = dataclasses.replace(camera, offset_map=str(tmp_path / "offset.npy"),
                                     e_per_adu_map=str(tmp_path / "gain.npy"), variance_map=str(tmp_path / "var.npy"))
    eng = engines.load_engine("openvino", model.net.eval(), threads=1)
    config = TileConfig(chunk_size=32, batch_size=2)

    def run() -> tuple[dict, EmitterTable, bool]:
        ex = TiledExecutor(model.net, frames.shape[1:], config, camera=camera, engine=eng)
        outputs, rows = {}, []

        def consume(tile, ids, output):
            for i, f in enumerate(ids):
                outputs[(tile.index, int(f))] = np.array(output[i], dtype=np.float32)
            return detect_candidates(output, ids, config=PostprocessConfig(), offset=tile.offset,
                                     core=tile.core_in_keep)

        for block in ex.run(ArrayStack(frames), consume, prefetch_depth=0):
            rows.extend(block.results)
        return outputs, block_emitters(rows, PostprocessConfig(), frames.shape[1:]), ex.arrays

    arrays, found, on_arrays = run()
    monkeypatch.setattr(type(eng), "takes_arrays", False)
    tensors, ref, on_tensors = run()
    assert on_arrays and not on_tensors and arrays.keys() == tensors.keys() and len(arrays) % 7 == 0
    diff = np.stack([np.abs(arrays[k] - tensors[k]).max(axis=(1, 2)) for k in arrays]).max(axis=0)
    assert (diff <= np.asarray(engines.ENGINE_ATOL)).all(), f"max abs difference per channel {diff.tolist()}"
    assert_same_emitters(ref, found, PostprocessConfig().threshold)


def test_openvino_honours_the_thread_count(shipped_model) -> None:
    _needs("openvino")
    eng = engines.load_engine("openvino", load_model(str(shipped_model)).net.eval(), threads=1)
    assert eng.threads == 1 and int(eng._ff.get_property("INFERENCE_NUM_THREADS")) == 1


def test_openvino_runs_as_many_requests_at_once_as_there_are_streams(shipped_model) -> None:
    """With one OpenVINO stream, the executor's two stream threads took turns: each stream gets its own."""
    _needs("openvino")
    eng = engines.load_engine("openvino", load_model(str(shipped_model)).net.eval(), threads=1, streams=2)
    for compiled in (eng._ff, eng._tp):
        assert int(compiled.get_property("NUM_STREAMS")) == 2
        assert int(compiled.get_property("INFERENCE_NUM_THREADS")) == 2  # one thread per stream


def test_auto_takes_torch_without_a_warning_when_no_runtime_is_installed_and_says_why(
        monkeypatch, shipped_model, sample_frames) -> None:
    """'auto' is the command line's default: without the optional runtimes it is torch, said in the engine's
    reason (one line, which the command prints once), not warned about on every run."""
    monkeypatch.setattr(engine_choice, "installed", lambda name: name == "torch")
    model = load_model(str(shipped_model))
    ref = EmitterTable.concat(predict_stack(sample_frames[:4], model, chunk_size=64, batch_size=2, amp="off",
                                            device="cpu"))
    chosen = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = EmitterTable.concat(predict_stack(sample_frames[:4], model, chunk_size=64, batch_size=2, amp="off",
                                                device="cpu", engine="auto", on_plan=chosen.append))
    assert not [w for w in caught if "engine" in str(w.message)]
    why = chosen[0].engine
    assert why.startswith("auto: torch") and "no CPU runtime installed" in why and "\n" not in why
    assert np.array_equal(np.asarray(ref["x"]), np.asarray(got["x"]))  # torch itself: the very same numbers


def test_auto_falls_back_to_torch_when_the_runtime_fails_to_load(monkeypatch, shipped_model) -> None:
    def broken(name, net, threads=None, cache_dir=None, streams=1, precision="fp32"):
        raise engines.EngineUnavailable(f"engine {name}: failed to load the network (RuntimeError: boom)")

    monkeypatch.setattr(engine_choice, "installed", lambda name: True)
    monkeypatch.setattr(engine_choice, "load_engine", broken)
    monkeypatch.setattr(engine_choice, "engine_key", lambda *a: "never timed")
    choice = engine_choice.choose_engine("auto", load_model(str(shipped_model)).net, plan=None,
                                         device=torch.device("cpu"), threads=1)
    assert choice.name == "torch" and choice.fallback and "boom" in choice.why and "\n" not in choice.why


def test_an_engine_asked_for_by_name_that_is_missing_is_a_config_error(monkeypatch, shipped_model) -> None:
    monkeypatch.setattr(engines, "installed", lambda name: name == "torch")
    with pytest.raises(ConfigError, match=r"openvino not installed .*\[cpu\]"):
        engines.load_engine("openvino", load_model(str(shipped_model)).net)
    with pytest.raises(ConfigError, match="CPU runtime"):
        engine_choice.choose_engine("onnxruntime", None, None, torch.device("cuda"))
    with pytest.raises(ConfigError, match="engine must be one of"):
        request.SizeRequest(engine="tensorrt")


def test_auto_remembers_its_timings(monkeypatch, tmp_path, shipped_model, sample_frames) -> None:
    present = [r for r in engines.RUNTIMES if engines.installed(r)]
    if not present:
        pytest.skip("no CPU runtime installed (the optional 'cpu' extra: pip install -e \".[cpu]\")")
    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "throughput.json"))
    trained = load_model(str(shipped_model))
    model = trained.net  # the network alone: no training physics, so no int8 to check (test_auto_int8.py)
    next(predict_stack(sample_frames[:4], model, chunk_size=64, batch_size=2, amp="off", device="cpu",
                       engine="auto", camera=trained.camera))
    table = json.loads((tmp_path / "engines.json").read_text())
    assert {k.rsplit("|", 1)[1].split()[0] for k in table} == {"torch", *present}  # timed taking turns
    calls = []
    monkeypatch.setattr(engine_choice, "time_engines", lambda *a: calls.append(a) or {})
    next(predict_stack(sample_frames[:4], model, chunk_size=64, batch_size=2, amp="off", device="cpu",
                       engine="auto", camera=trained.camera))
    assert not calls  # the second run reads what the first measured


def test_the_engine_choices_agree() -> None:
    assert request.ENGINE_CHOICES == engines.ENGINE_CHOICES


@pytest.mark.parametrize("name", ["openvino", "onnxruntime"])
def test_the_converted_network_is_kept_on_disk_and_read_back(name, tmp_path, shipped_model) -> None:
    _needs(name)
    net = load_model(str(shipped_model)).net.eval()
    x = torch.randn(3, net.config.input_channels, 32, 32, generator=torch.Generator().manual_seed(0))
    first = engines.load_engine(name, net, threads=1, cache_dir=tmp_path)
    (folder,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    assert folder.name.startswith(name) and engines.network_digest(net) in folder.name
    stamps = {p: p.stat().st_mtime_ns for p in folder.iterdir() if p.is_file()}
    again = engines.load_engine(name, net, threads=1, cache_dir=tmp_path)
    assert {p: p.stat().st_mtime_ns for p in folder.iterdir() if p.is_file()} == stamps  # read, not rewritten
    assert torch.equal(first.frame_features(x), again.frame_features(x))


def test_the_engine_flag_reaches_the_planner_and_the_summary(tmp_path) -> None:
    from decode_mem.infer.__main__ import build_parser, config_from_args

    args = build_parser().parse_args([str(tmp_path / "m.tif"), "--out", str(tmp_path / "o"), "--engine", "openvino"])
    cfg = config_from_args(args)
    assert cfg.engine == cfg.sizes.engine == "openvino" and cfg.settings()["engine"] == "openvino"
    default = config_from_args(build_parser().parse_args([str(tmp_path / "m.tif"), "--out", str(tmp_path / "o")]))
    assert default.sizes.engine == "auto" and default.settings()["engine"] == "auto"  # the command's default
    args = build_parser().parse_args([str(tmp_path / "m.tif"), "--out", str(tmp_path / "o"), "--engine", "torch"])
    assert "engine" not in config_from_args(args).settings()  # the library's default: not recorded


def test_infer_refuses_a_missing_runtime_before_any_work(monkeypatch, tmp_path, capsys) -> None:
    from decode_mem.infer import __main__ as cli
    from decode_mem.infer import config

    monkeypatch.setattr(config, "missing_runtime", lambda engine: "openvino" if engine == "openvino" else None)
    code = cli.main([str(tmp_path / "m.tif"), "--out", str(tmp_path / "o"), "--engine", "openvino", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "engine openvino: openvino not installed" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_the_plan_counts_a_runtimes_working_set(shipped_model, monkeypatch, tmp_path) -> None:
    from decode_mem.footprint.inference import INT8_WORKING_SET, RUNTIME_WORKING_SET, plan_for
    from decode_mem.footprint.request import Workload

    # a cache of its own: a working-set ratio another test process remembers meanwhile would change torch's plan
    # only (one failure in a run of the suite with two workers)
    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "throughput.json"))
    net = load_model(str(shipped_model)).net
    work = Workload((128, 128), torch.device("cpu"), 0, 2, 8)
    plans = {e: plan_for(net, work, request.SizeRequest(chunk_size=128, batch_size=2, block=4, amp="off", engine=e))
             for e in ("torch", "openvino", "onnxruntime", "openvino-int8")}
    net_bytes = plans["torch"].network_bytes
    for e, factor in (("openvino", RUNTIME_WORKING_SET), ("onnxruntime", RUNTIME_WORKING_SET),
                      ("openvino-int8", INT8_WORKING_SET)):
        assert plans[e].network_bytes == net_bytes  # the same trace, counted for the runtime's own buffers
        grown = plans[e].network_host_bytes - plans["torch"].network_host_bytes
        assert grown == pytest.approx((factor - 1) * net_bytes, abs=2)


def test_a_runtime_serves_parallel_streams(shipped_model, sample_frames) -> None:
    _needs("openvino")  # one infer request per stream's thread
    runs = {}
    for engine, streams in (("torch", 1), ("openvino", 2)):
        model = load_model(str(shipped_model))
        runs[engine] = EmitterTable.concat(predict_stack(sample_frames[:12], model, chunk_size=64, batch_size=2,
                                                         block=4, amp="off", device="cpu", engine=engine,
                                                         streams=streams, threads=2))
    assert_same_emitters(runs["torch"], runs["openvino"], PostprocessConfig().threshold)


def _first_calls_at_once() -> None:
    """In a fresh process (run by the test below): eight threads make their first OpenVINO calls at the same
    instant, as ``streams`` threads do at a run's first blocks."""
    import threading

    from infer_helpers import DEFAULT_MODEL

    model = load_model(str(DEFAULT_MODEL))
    engine = engines.load_engine("openvino", model.net, threads=1, streams=2)
    barrier, done = threading.Barrier(8), []

    def first_call() -> None:
        x = np.zeros((1, model.net.config.input_channels, 32, 32), np.float32)
        barrier.wait()
        done.append(engine.frame_features(x).shape)

    threads = [threading.Thread(target=first_call, daemon=True) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(done) == 8, f"{8 - len(done)} of 8 threads did not return from their first call"


def test_streams_first_calls_at_once_return(shipped_model) -> None:
    """OpenVINO's bindings set up their numpy conversion at the first array; two ``--streams 2`` threads doing that
    at once deadlocked a run (``engine._numpy_api_ready``). The race is rare (2 of 20 starts of this check hung
    without the fix, ad hoc): this runs the path every time and meets the race now and then. A hang is the
    subprocess's timeout."""
    _needs("openvino")
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).parent  # the helpers this module imports: tests/inference's and tests/
    code = f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]; import runpy; " \
           f"runpy.run_path({__file__!r})['_first_calls_at_once']()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def _cpu_has_avx512_core() -> bool:
    """AVX-512 F, BW, DQ and VL: oneDNN's avx512_core, where OpenVINO computes bf16 when asked."""
    return {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= (cpu_flags() or set())


def test_openvino_computes_in_bf16_where_the_cpu_has_it_and_stays_close_to_fp32(shipped_model, sample_frames) -> None:
    """With amp bf16 (what 'auto' resolves to on a CPU with native bf16) OpenVINO compiles in bf16, as torch
    computes then; its raw outputs stay within bf16's rounding of the fp32 ones. OpenVINO honours the hint where
    the CPU has AVX-512 (its own rule: native bf16, else simulated on AVX-512's integer units, slower; seen on an
    Intel Xeon without AVX-512 BF16 on 2026-12-04); on a CPU without AVX-512 it ignores the hint and says fp32."""
    _needs("openvino")
    from decode_mem.model.precision import cpu_has_native_bf16

    frames = np.tile(sample_frames[:7], (1, 2, 2)).astype(np.float32)
    model = load_model(str(shipped_model))
    eng = engines.load_engine("openvino", model.net.eval(), threads=1, precision="bf16")
    assert eng.precision == ("bf16" if cpu_has_native_bf16() or _cpu_has_avx512_core() else "fp32")
    assert engines.load_engine("openvino", model.net.eval(), threads=1).precision == "fp32"
    ref = executor_outputs(model, frames)
    got = executor_outputs(model, frames, eng)
    p = torch.stack([torch.sigmoid(ref[k][0]) for k in ref])
    det = p > 0.5
    assert int(det.sum()) >= 10
    for ch, tol in ((2, 0.02), (3, 0.02)):  # dx, dy in px: bf16's 8-bit mantissa, within 2 nm at 100 nm px
        d = torch.stack([got[k][ch] - ref[k][ch] for k in ref])[det].abs()
        assert float(d.max()) < tol, f"channel {ch}: {float(d.max())} px"
    photons = torch.stack([ref[k][1] for k in ref])[det]
    dp = torch.stack([got[k][1] - ref[k][1] for k in ref])[det]
    assert float((dp.abs() / photons.abs()).median()) < 0.03  # photons: within a few % (bf16)
    if eng.precision == "bf16":  # not the fp32 result: the hint took effect
        assert float(torch.stack([(got[k] - ref[k]).abs().amax() for k in ref]).amax()) > 1e-3


def test_a_runtime_follows_the_plans_amp(shipped_model, monkeypatch) -> None:
    _needs("openvino")
    from types import SimpleNamespace

    assert engine_choice.runtime_precision(SimpleNamespace(amp="bf16")) == "bf16"
    assert engine_choice.runtime_precision(SimpleNamespace(amp="off")) == "fp32"
    assert engine_choice.runtime_precision(None) == "fp32"
    asked = []
    real = engine_choice.load_engine
    monkeypatch.setattr(engine_choice, "load_engine", lambda *a, **k: asked.append(a[5]) or real(*a, **k))
    net = load_model(str(shipped_model)).net.eval()
    choice = engine_choice.choose_engine("openvino", net, SimpleNamespace(amp="bf16", streams=1),
                                         torch.device("cpu"), 1)
    assert asked == ["bf16"] and choice.why.endswith(f", {choice.engine.precision}")
    with pytest.raises(ConfigError, match="precision"):
        engines.load_engine("openvino", net, threads=1, precision="int8")


def test_openvino_lends_its_buffers_to_the_executor_and_the_outputs_are_those_of_copies(shipped_model,
                                                                                         sample_frames) -> None:
    """The executor takes OpenVINO's outputs without a copy (``borrow``): the next call overwrites them, so the
    features it carries and the outputs it hands out must be used or copied first. Same outputs, bit for bit, as
    the engine copying every output; several blocks and tiles, features carried between runs."""
    _needs("openvino")
    model = load_model(str(shipped_model))
    eng = engines.load_engine("openvino", model.net, threads=1)
    frames = np.tile(sample_frames[:9], (1, 2, 2)).astype(np.float32)
    x = torch.zeros(2, model.net.config.input_channels, 32, 32)
    first = eng.frame_features(x, borrow=True)
    second = eng.frame_features(x + 1.0, borrow=True)
    assert first.data_ptr() == second.data_ptr()  # one buffer: what makes a borrowed output short-lived
    copies = eng.frame_features(x), eng.frame_features(x)  # both held: a freed copy's memory could come back
    assert copies[0].data_ptr() != copies[1].data_ptr()  # copies by default

    class Copying:  # the same engine without lending its buffers
        name, precision, takes_arrays = eng.name, eng.precision, eng.takes_arrays
        frame_features, temporal = eng.frame_features, eng.temporal

    lent = executor_outputs(model, frames, eng)
    copied = executor_outputs(model, frames, Copying())
    assert lent.keys() == copied.keys() and len(lent) >= 4 * 9
    assert all(torch.equal(lent[k], copied[k]) for k in lent)


@pytest.mark.parametrize("fastest", ["openvino", "torch"])
def test_auto_warms_the_torch_network_up_only_where_it_runs(fastest, monkeypatch, tmp_path, shipped_model,
                                                            sample_frames) -> None:
    """'auto' plans as torch, chooses the engine, then plans again for it. The once-per-process warm-up of the torch
    network (0.2 s of a repeat run on the 2-core AMX Xeon) comes before the planner first runs the network (a fresh
    machine measures the working set of the given sizes) and before a run that torch computes; a repeat run that a
    runtime computes pays none."""
    _needs("openvino")
    from decode_mem.footprint import choose

    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "throughput.json"))
    monkeypatch.setattr(engine_choice, "time_engines",
                        lambda net, plan, device, found, *a: {n: 0.5 if n == fastest else 1.0 for n in found})
    events = []
    real_warm, real_measure = choose.warm_up, choose.measure_working_set
    monkeypatch.setattr(choose, "warm_up", lambda *a, **k: events.append("warm") or real_warm(*a, **k))
    monkeypatch.setattr(choose, "measure_working_set",
                        lambda *a, **k: events.append("measure") or real_measure(*a, **k))
    trained = load_model(str(shipped_model))
    for run in ("first", "repeat"):
        events.clear()
        plans = []
        next(predict_stack(sample_frames[:4], trained.net, chunk_size=64, batch_size=2, amp="off", device="cpu",
                           engine="auto", camera=trained.camera, on_plan=plans.append))
        assert fastest in plans[0].engine.split(",")[0], plans[0].engine
        if run == "first":  # nothing measured yet: warmed up before the working set is
            assert events[:2] == ["warm", "measure"] and events.count("warm") <= 1 + (fastest == "torch"), events
            # a process whose peak RssAnon cannot be told apart exactly, or whose heap already held the unit's
            # memory (``working_set.measure_ratio``, e.g. a long test worker), keeps no ratio: the repeat measures
            # again, warmed up first
            kept = (tmp_path / "working_set.json").is_file()
        elif kept:  # everything remembered: the network is warmed up only where torch will run it
            assert events == (["warm"] if fastest == "torch" else []), events
        else:
            assert events[:2] == ["warm", "measure"], events


def test_auto_sizes_are_timed_with_the_runtime_that_computes_them(monkeypatch, tmp_path, shipped_model,
                                                                  sample_frames) -> None:
    """A runtime's best batch is not torch's (int8 at 256² on the 2-core AMX Xeon: 4 against torch's 2, the whole
    command 8 % faster): once 'auto' has taken a runtime, the candidate sizes are timed with it, remembered beside
    the engine timings, and a repeat run times nothing; the runtime asked for by name takes them too."""
    _needs("openvino")
    from decode_mem.footprint import choose

    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "throughput.json"))
    per_unit = {"torch": {1: 0.01, 2: 0.03, 4: 0.09},  # seconds per unit: torch fastest per frame at batch 1,
                "openvino": {1: 0.005, 2: 0.006, 4: 0.008}}  # the runtime at batch 4
    timed: list[tuple[str, int]] = []

    def time_engines(net, plan, device, found, *a):
        timed.extend((n, plan.batch_size) for n in found)
        return {n: per_unit.get(n, {1: 1.0, 2: 1.0, 4: 1.0})[plan.batch_size] for n in found}

    monkeypatch.setattr(engine_choice, "time_engines", time_engines)
    monkeypatch.setattr(choose, "time_unit", lambda net, plan, device: per_unit["torch"][plan.batch_size])
    trained = load_model(str(shipped_model))
    frames = np.tile(sample_frames[:4], (1, 2, 2))  # 128² frames: every batch fits one tile
    plans = []
    for engine in ("torch", "auto", "auto", "openvino"):
        timed.clear()
        next(predict_stack(frames, trained.net, amp="off", device="cpu", engine=engine, camera=trained.camera,
                           on_plan=plans.append))
        if engine == "torch":
            assert plans[-1].plan.batch_size == 1 and not timed
        elif len(plans) == 2:  # the first auto run: the engines at torch's sizes, then the runtime's candidates
            assert plans[-1].plan.batch_size == 4 and "openvino" in plans[-1].engine.split(",")[0]
            assert {b for n, b in timed if n == "openvino"} == {1, 2, 4}
            assert not any(n == "torch" for n, b in timed if b != 1)  # torch timed only at its own sizes
            table = json.loads((tmp_path / "engines.json").read_text())
            assert sum("|openvino" in k for k in table) == 3
        else:  # a repeat run, or the runtime by name: every timing remembered
            assert plans[-1].plan.batch_size == 4 and not timed


def test_the_plan_command_times_a_runtime_by_name_as_infer_does(monkeypatch, tmp_path, capsys) -> None:
    """``python -m decode_mem.plan --engine openvino`` chooses the sizes infer would: timed with the runtime."""
    _needs("openvino")
    from decode_mem.footprint import choose
    from decode_mem.plan.__main__ import main

    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "throughput.json"))
    monkeypatch.setattr(engine_choice, "time_engines",
                        lambda net, plan, device, found, *a: {n: {1: 0.005, 2: 0.006, 4: 0.008}[plan.batch_size]
                                                              for n in found})
    monkeypatch.setattr(choose, "time_unit", lambda net, plan, device: {1: 0.01, 2: 0.03, 4: 0.09}[plan.batch_size])
    for engine, batch in (("torch", 1), ("openvino", 4)):
        assert main(["--frame", "128", "128", "--amp", "off", "--engine", engine]) == 0
        out = capsys.readouterr().out
        assert f"batch_size {batch}," in out, out
    assert "engine openvino" in out and "measured here before" in out, out  # the runtime's own timing, remembered
