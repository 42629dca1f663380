"""Inference back ends for the two sub-networks the tiled executor calls: torch, or a runtime made for CPUs.

``DecodeNet.frame_features`` (once per tile and frame) and ``DecodeNet.temporal`` (once per window) are the whole
network work of inference; the executor normalizes, cuts tiles, reuses features and stitches around them. An
engine runs those two, torch tensors in and out (a runtime also numpy arrays, ``takes_arrays``: the executor's work
around it is then done on arrays, ``model.arrays``), so the executor's work order and exact stitching stay as they
are:

* ``torch``: the modules themselves (what ``amp`` and ``torch.compile`` act on);
* ``openvino``: both sub-networks converted with ``openvino.convert_model`` (dynamic batch and tile size),
  compiled for the CPU in fp32, or in bf16 where the run's ``amp`` is bf16 on a CPU with native bf16 (as torch
  computes then), with ``threads`` inference threads per stream and one OpenVINO stream and infer request per
  calling thread (the executor's ``streams``: with one OpenVINO stream they took turns);
* ``onnxruntime``: both exported with ``torch.onnx.export`` (which needs the ``onnx`` package) and run by ONNX
  Runtime's CPU provider with ``threads`` intra-op threads (idle threads do not spin);
* ``openvino-int8``: OpenVINO with both parts quantized to int8 by NNCF (``decode_mem.model.int8``: calibrated on
  windows simulated from the checkpoint's training physics, the heads' raw outputs corrected for int8's bias). Its
  outputs are close to fp32's, not equal: 'auto' takes it only where its check against fp32 on simulated windows of
  the training physics passed (``infer.int8_check``; ``RUNTIMES`` are the exact ones it always times).

With a ``cache_dir`` (``footprint.engines`` passes ``engines/`` beside the planner's cache) the converted network is
kept on disk, keyed by the weights, the model code and the runtime's version (``network_digest``): tracing and
converting run once per machine and checkpoint, later runs read the files (OpenVINO also caches its compiled
kernels there). The runtimes come with the optional ``cpu`` extra (``pip install -e ".[cpu]"``); without it only
``torch`` loads. ONNX Runtime computes in fp32 whatever ``amp`` asks.
The fp32 outputs equal torch's up to float rounding (``ENGINE_ATOL``; ``benchmarks/results/cpu_engines.md``). A
runtime that is not installed or fails to convert the network is an ``EngineUnavailable`` (a ``ConfigError``)
naming why.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from decode_mem.errors import ConfigError, exception_line
from decode_mem.torch_facts import torch_threads, torch_version

if TYPE_CHECKING:
    import torch

RUNTIMES = ("openvino", "onnxruntime")  # the same results as torch: what 'auto' always chooses among
QUANTIZED = ("openvino-int8",)  # close to them, not equal (``model.int8``): by name, or by 'auto' where verified
ENGINES = ("torch", *RUNTIMES, *QUANTIZED)
ENGINE_CHOICES = ("auto", *ENGINES)
RUNTIME_MODULES = {"openvino": ("openvino",), "onnxruntime": ("onnxruntime", "onnx"),
                   "openvino-int8": ("openvino", "nncf")}  # what each runtime imports
EXTRA_HINT = "pip install -e \".[cpu]\""
# largest difference from torch's fp32 output allowed per output channel (OUTPUT_CHANNELS order), in its units:
# float summation order only (measured 1e-5 .. 8e-3 on the shipped model; photons ~1e3, sigma_z in nm)
OV_PRECISION = {"fp32": "f32", "bf16": "bf16"}  # engine precision -> OpenVINO's INFERENCE_PRECISION_HINT
INT8_FILES = ("frame_features.xml", "frame_features.bin", "temporal_raw.xml", "temporal_raw.bin", "correction.json")
"""What 'openvino-int8' keeps of a quantized network (``model.int8`` writes them): both models and the correction."""
ENGINE_ATOL = (1e-3, 2e-2, 1e-4, 1e-4, 1e-2, 5e-2, 1e-4, 1e-4, 1e-2, 1e-3)


class EngineUnavailable(ConfigError):
    """A runtime that is not installed or failed to load the network; the message says which and why."""


def installed(name: str) -> bool:
    """Whether the runtime ``name`` can be imported (torch always can; ``onnxruntime`` also needs ``onnx``)."""
    if name == "torch":
        return True
    return all(importlib.util.find_spec(m) is not None for m in RUNTIME_MODULES.get(name, (name,)))


@functools.cache
def runtime_version(name: str) -> str:
    """``<name> <version>`` of an engine's runtime (torch's for ``torch``); read once per process (a package's
    metadata is looked up on disk: 27 lookups took 0.06 s of a repeat run's engine stage)."""
    if name == "torch":
        return f"torch {torch_version()}"
    if name in QUANTIZED:
        return f"{name} " + "+".join(runtime_version(m).replace(" ", "-") for m in RUNTIME_MODULES[name])
    try:
        return f"{name} {importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{name} (not installed)"


def network_digest(net: Any) -> str:
    """A short hash of what a converted network depends on: the model code (``decode_mem/model``), the
    config and every weight (in standard layout, so channels-last weights hash the same); a ``KnownNetwork``'s
    kept one (``model.trained``: the weights are not loaded)."""
    kept = getattr(net, "digest", None)
    if isinstance(kept, str):
        return kept
    h = hashlib.sha256()
    for src in sorted(Path(__file__).parent.glob("*.py")):
        h.update(src.read_bytes())
    h.update(repr(net.config).encode())
    for k, v in sorted(net.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().to("cpu").contiguous().numpy().tobytes())
    return h.hexdigest()[:20]


def cache_folder(cache_dir: Path, name: str, net: Any, extra: str = "") -> Path:
    """Where runtime ``name`` keeps ``net`` converted under ``cache_dir``: named by the runtime's version and a hash
    of the network (``network_digest``) and of ``extra``, anything else the files depend on."""
    digest = network_digest(net)
    if extra:
        digest = hashlib.sha256(f"{digest}{extra}".encode()).hexdigest()[:20]
    return Path(cache_dir) / f"{runtime_version(name).replace(' ', '-').replace('+', '-')}-{digest}"


def _cached(cache_dir: Path | None, name: str, net: Any, files: tuple[str, ...], write: Any,
            extra: str = "") -> Path | None:
    """The folder holding ``files`` of the converted ``net`` for runtime ``name`` under ``cache_dir``
    (``cache_folder``), made with ``write(folder)`` when it is not there yet (in a temporary folder renamed into
    place: a concurrent run or a kill leaves no half-written model). None without a ``cache_dir`` or where it
    cannot be written."""
    if cache_dir is None:
        return None
    final = cache_folder(Path(cache_dir), name, net, extra)
    if all((final / f).is_file() for f in files):
        return final
    try:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".part-", dir=cache_dir))
    except OSError:
        return None
    try:
        write(tmp)
        os.replace(tmp, final)
    except OSError:  # another process put it there first, or the folder is read-only
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final if all((final / f).is_file() for f in files) else None


class TorchEngine:
    """The network's own modules (the default)."""

    name = "torch"

    def __init__(self, net: Any) -> None:
        self.net = net
        self.threads: int | None = None

    def frame_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.frame_features(x)

    def temporal(self, f_prev: torch.Tensor, f_mid: torch.Tensor, f_next: torch.Tensor) -> torch.Tensor:
        return self.net.temporal(f_prev, f_mid, f_next)


def _numpy(x: torch.Tensor | np.ndarray) -> np.ndarray:
    """A float32, C-contiguous (NCHW) CPU array of ``x`` (no copy where it is one already)."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x, dtype=np.float32)
    import torch

    return x.detach().to("cpu", torch.float32).contiguous().numpy()


def _like(given: torch.Tensor | np.ndarray, out: np.ndarray) -> torch.Tensor | np.ndarray:
    """A runtime's output ``out`` as the caller gave its input: an array for an array, else a tensor (no copy)."""
    if isinstance(given, np.ndarray):
        return out
    import torch

    return torch.from_numpy(out)


class OpenVINOEngine:
    """Both sub-networks compiled by OpenVINO for the CPU in ``precision`` ('fp32', or 'bf16': OpenVINO's
    inference precision hint, which it honours on CPUs with native bf16 or AVX-512 (simulated there) and ignores
    elsewhere; ``precision`` after loading says what it compiled), ``threads`` inference threads per stream.

    ``streams``: calls made at once from as many threads (the executor's ``streams``). OpenVINO runs at most its
    ``NUM_STREAMS`` requests in parallel and queues the others, so the compiled networks get that many streams of
    ``threads`` threads each (with one stream, two calling threads took turns)."""

    name = "openvino"
    lends_outputs = True  # ``borrow=True`` is understood: outputs in OpenVINO's own buffers (the executor's hot path)
    takes_arrays = True  # numpy arrays in, numpy arrays out (tensors in, tensors out): the executor works on arrays

    def __init__(self, net: Any, threads: int, cache_dir: Path | None = None, streams: int = 1,
                 precision: str = "fp32") -> None:
        import openvino as ov

        self.net = net

        def write(folder: Path) -> None:
            from decode_mem.model.convert import openvino_models

            for model, stem in zip(openvino_models(net), ("frame_features", "temporal"), strict=True):
                ov.save_model(model, str(folder / f"{stem}.xml"), compress_to_fp16=False)  # fp32 weights as they are

        core = ov.Core()
        folder = _cached(cache_dir, self.name, net, ("frame_features.xml", "frame_features.bin", "temporal.xml",
                                                     "temporal.bin"), write)
        if folder is not None:
            ff, tp = core.read_model(str(folder / "frame_features.xml")), core.read_model(str(folder / "temporal.xml"))
        else:
            from decode_mem.model.convert import openvino_models

            ff, tp = openvino_models(net)
        self._compile(core, ff, tp, threads, streams, precision, folder)

    def _compile(self, core: Any, ff: Any, tp: Any, threads: int, streams: int, precision: str,
                 folder: Path | None) -> None:
        """Compile both sub-networks for the CPU (``threads`` per stream, ``streams`` streams, OpenVINO's
        kernel cache in ``folder``) and note the precision it compiled."""
        self.threads, self.streams = int(threads), max(1, int(streams))
        config: dict[str, Any] = {"INFERENCE_NUM_THREADS": self.threads * self.streams,
                                  "INFERENCE_PRECISION_HINT": OV_PRECISION[precision], "NUM_STREAMS": self.streams}
        if self.streams == 1:
            config["PERFORMANCE_HINT"] = "LATENCY"
        if folder is not None:
            config["CACHE_DIR"] = str(folder / "compiled")
        self._ff = core.compile_model(ff, "CPU", config)
        self._tp = core.compile_model(tp, "CPU", config)
        compiled = str(self._ff.get_property("INFERENCE_PRECISION_HINT"))  # what it did: 'f32' or 'bf16'
        self.precision = "bf16" if "bf16" in compiled or "bfloat16" in compiled else "fp32"
        self._local = threading.local()
        _numpy_api_ready()

    def _requests(self) -> tuple[Any, Any]:
        """This thread's infer requests (a request serves one call at a time; ``streams`` call from threads)."""
        req = getattr(self._local, "requests", None)
        if req is None:
            req = self._local.requests = (self._ff.create_infer_request(), self._tp.create_infer_request())
        return req

    def frame_features(self, x: torch.Tensor | np.ndarray, *, borrow: bool = False) -> torch.Tensor | np.ndarray:
        """``borrow``: the output is the infer request's own buffer, not a copy, valid until this thread's next call
        of ``frame_features`` (the copies took ~6 % of the network's time in a 256² run on the 2-core AMX Xeon,
        docs/developers.md)."""
        out = self._requests()[0].infer({0: _numpy(x)}, share_inputs=True, share_outputs=borrow)
        return _like(x, out[0])

    def temporal(self, f_prev: torch.Tensor | np.ndarray, f_mid: torch.Tensor | np.ndarray,
                 f_next: torch.Tensor | np.ndarray, *, borrow: bool = False) -> torch.Tensor | np.ndarray:
        """``borrow``: as ``frame_features``'s, until this thread's next call of ``temporal``."""
        out = self._requests()[1].infer({i: _numpy(t) for i, t in enumerate((f_prev, f_mid, f_next))},
                                        share_inputs=True, share_outputs=borrow)
        return _like(f_prev, out[0])


def _numpy_api_ready() -> None:
    """OpenVINO's bindings (pybind11) set up their numpy API once, at the first array they convert, under a static
    guard taken while holding the GIL: two ``streams`` threads converting their first arrays at once deadlocked (a
    ``--streams 2`` run hung at its first block, 2026-12-07). Converting one here, in the thread that loads the
    engine, sets it up before any stream starts (ad hoc, eight threads making their first calls at a barrier in a
    fresh process: 2 of 20 starts hung without it, none of 20 with it)."""
    import openvino as ov

    ov.Tensor(np.zeros(1, np.float32)).get_element_type().to_dtype()


def physics_key(simulation: dict[str, Any]) -> str:
    """The training physics as text, for the int8 cache's name (its calibration windows are simulated from it)."""
    import json

    return json.dumps(simulation, sort_keys=True, default=str)


def int8_folder(cache_dir: str | os.PathLike, net: Any, simulation: dict[str, Any]) -> Path:
    """Where 'openvino-int8' keeps ``net`` quantized for ``simulation`` under ``cache_dir`` (``cache_folder``): the
    quantized models, their correction and the verdict of their check against fp32 (``infer.int8_check``)."""
    return cache_folder(Path(cache_dir), OpenVINOInt8Engine.name, net, physics_key(simulation))


def int8_kept(net: Any, cache_dir: str | os.PathLike, simulation: dict[str, Any]) -> bool:
    """Whether 'openvino-int8' finds ``net`` quantized for ``simulation`` in ``cache_dir`` (an earlier run on this
    machine made it); where not, its first run quantizes the network before the first block (NNCF, in a child
    process) and later runs read the files."""
    folder = int8_folder(cache_dir, net, simulation)
    return all((folder / f).is_file() for f in INT8_FILES)


class OpenVINOInt8Engine(OpenVINOEngine):
    """OpenVINO with both sub-networks quantized to int8 (``decode_mem.model.int8``: NNCF post-training
    quantization calibrated on windows simulated from ``simulation``, the checkpoint's training physics, and an
    affine correction of the heads' raw outputs), made once per machine and checkpoint and kept in ``cache_dir``.
    The layers kept in float compute in ``precision`` ('bf16': only on a CPU with native bf16). Its outputs are
    close to fp32's, not equal: ``benchmarks/results/cpu_engines.md`` measures how close."""

    name = "openvino-int8"

    def __init__(self, net: Any, threads: int, cache_dir: Path | None = None, streams: int = 1,
                 precision: str = "fp32", simulation: dict[str, Any] | None = None) -> None:
        import json

        import openvino as ov

        if not simulation:
            raise ConfigError(f"engine {self.name}: the model has no training physics to calibrate int8 on")
        self.net = net
        core = ov.Core()

        def write(folder: Path) -> None:
            from decode_mem.model import int8

            int8.write_in_child(net, simulation, folder, threads)

        folder = _cached(cache_dir, self.name, net, INT8_FILES, write, extra=physics_key(simulation))
        with tempfile.TemporaryDirectory(prefix="decode_mem_int8_") as tmp:
            if folder is None:  # no cache: made for this run only
                write(Path(tmp))
            where = folder if folder is not None else Path(tmp)
            ff = core.read_model(str(where / "frame_features.xml"))
            tp = core.read_model(str(where / "temporal_raw.xml"))
            saved = json.loads((where / "correction.json").read_text())
            coef = np.stack([saved["a"], saved["b"]], axis=1)
            self._compile(core, ff, tp, threads, streams, precision, folder)
        self.folder = folder  # where its files are kept (None: made for this run only)
        self.float_precision, self.precision = self.precision, "int8"  # of the layers kept in float; of the engine
        self.correction = np.asarray(coef, dtype=np.float32)  # (10, 2): a, b per channel

    def temporal(self, f_prev: torch.Tensor | np.ndarray, f_mid: torch.Tensor | np.ndarray,
                 f_next: torch.Tensor | np.ndarray, *, borrow: bool = False) -> torch.Tensor | np.ndarray:
        """The corrected, activated output: a new tensor (an array for arrays: ``model.arrays``) whatever ``borrow``
        says (the raw one is borrowed)."""
        raw = super().temporal(f_prev, f_mid, f_next, borrow=True)
        if isinstance(raw, np.ndarray):
            from decode_mem.model.arrays import activate_in_place

            a, b = (self.correction[:, i].reshape(1, -1, 1, 1) for i in (0, 1))
            return activate_in_place(self.net.config, raw * a + b)  # the sum is an array of its own
        import torch

        a, b = (torch.from_numpy(self.correction[:, i].reshape(1, -1, 1, 1)) for i in (0, 1))
        return self.net.activate(torch.addcmul(b, raw, a), in_place=True)  # the sum is a tensor of its own


class OnnxRuntimeEngine:
    """Both sub-networks run by ONNX Runtime's CPU provider, fp32, ``threads`` intra-op threads.

    ``streams`` is not used: a session serves calls from several threads at once, on its one intra-op pool."""

    name = "onnxruntime"
    takes_arrays = True  # as OpenVINOEngine's

    def __init__(self, net: Any, threads: int, cache_dir: Path | None = None, streams: int = 1,
                 precision: str = "fp32") -> None:
        import onnxruntime as ort

        self.precision = "fp32"  # the CPU provider's kernels: fp32 whatever is asked

        self.net, self.threads = net, int(threads)

        def export() -> tuple[bytes, bytes]:
            from decode_mem.model.convert import FrameFeatures, Temporal, examples, onnx_bytes

            x, feats = examples(net)
            return (onnx_bytes(FrameFeatures(net), (x,), ["x"]), onnx_bytes(Temporal(net), feats, ["a", "b", "c"]))

        def write(folder: Path) -> None:
            for data, stem in zip(export(), ("frame_features", "temporal"), strict=True):
                (folder / f"{stem}.onnx").write_bytes(data)

        folder = _cached(cache_dir, self.name, net, ("frame_features.onnx", "temporal.onnx"), write)
        if folder is not None:
            models: tuple[Any, Any] = (str(folder / "frame_features.onnx"), str(folder / "temporal.onnx"))
        else:
            models = export()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = self.threads, 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # a shared machine: sleep when idle
        opts.log_severity_level = 3
        providers = ["CPUExecutionProvider"]
        self._ff = ort.InferenceSession(models[0], opts, providers=providers)
        self._tp = ort.InferenceSession(models[1], opts, providers=providers)

    def frame_features(self, x: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        return _like(x, self._ff.run(None, {"x": _numpy(x)})[0])

    def temporal(self, f_prev: torch.Tensor | np.ndarray, f_mid: torch.Tensor | np.ndarray,
                 f_next: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        feeds = {k: _numpy(t) for k, t in zip("abc", (f_prev, f_mid, f_next), strict=True)}
        return _like(f_prev, self._tp.run(None, feeds)[0])


Engine = TorchEngine | OpenVINOEngine | OnnxRuntimeEngine
_CLASSES = {"openvino": OpenVINOEngine, "onnxruntime": OnnxRuntimeEngine, "openvino-int8": OpenVINOInt8Engine}


def load_engine(name: str, net: Any, threads: int | None = None, cache_dir: str | os.PathLike | None = None,
                streams: int = 1, precision: str = "fp32", simulation: dict[str, Any] | None = None) -> Engine:
    """The engine ``name`` (``ENGINES``) for ``net`` (on the CPU, eval mode) with ``threads`` threads per stream
    (None: torch's count now) for ``streams`` threads calling it at once, its converted network kept in
    ``cache_dir`` (None: converted in memory each time), computing in ``precision`` ('fp32' or 'bf16': OpenVINO
    only; the engine's ``precision`` says what it does). 'openvino-int8' calibrates on ``simulation``, the
    checkpoint's training physics (``TrainedModel.simulation``; a ConfigError without it). EngineUnavailable where
    the runtime is missing or fails."""
    if precision not in OV_PRECISION:
        raise ConfigError(f"engine precision must be one of {', '.join(OV_PRECISION)}, got {precision!r}")
    if name == "torch":
        return TorchEngine(net)
    if name not in _CLASSES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINE_CHOICES)}, got {name!r}")
    if not installed(name):
        needs = RUNTIME_MODULES[name]
        missing = " and ".join(m for m in needs if importlib.util.find_spec(m) is None) or " and ".join(needs)
        raise EngineUnavailable(f"engine {name}: {missing} not installed ({EXTRA_HINT})")
    n = int(threads) if threads else torch_threads()
    folder = None if cache_dir is None else Path(cache_dir)
    if name in QUANTIZED and not simulation:
        raise ConfigError(f"engine {name}: the model has no training physics to calibrate int8 on (a checkpoint's "
                          "simulation settings)")
    try:
        if name in QUANTIZED:
            return _CLASSES[name](net, n, folder, streams, precision, simulation)
        return _CLASSES[name](net, n, folder, streams, precision)
    except Exception as e:  # a runtime fails in its own ways (conversion, unsupported op, its own errors)
        raise EngineUnavailable(f"engine {name}: failed to load the network ({exception_line(e)})") from e
