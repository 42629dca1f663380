"""int8 for OpenVINO on a CPU: NNCF post-training quantization of the network's two parts, calibrated on simulated
windows of the model's own training physics, then an affine correction of the heads' raw outputs.

What is quantized: every convolution but the frame U-Net's first (3 input channels, about 1 % of the work, and the
layer whose int8 error moved positions and photons most when layers were quantized one at a time) and the heads'
last 1x1 convolutions with the element-wise operations around them (``KEPT_*``: fp32, or the run's bf16).
The heads' hidden 3x3 convolutions are int8: kept in float (with the correction below) they changed the int8
error by under 3 % (positions 0.99 / 0.93 against 1.02 / 0.96 nm RMS, photons 3.51 against 3.54 % RMS) and cost 9 %
of the network's time. Activations are quantized asymmetrically (NNCF's MIXED preset: the ELU's outputs reach down
to -1 only, so a symmetric range wastes half its codes). These choices come from an ad-hoc exploration on the
shipped small model (an AVX2 EPYC, 2026-12-03; not a report): with the symmetric preset positions moved 1.0 nm on
average against 0.6–0.7 with MIXED; global min/max activation ranges instead of NNCF's default moved them more
(1.1–1.3 nm).

Why the correction: int8 alone shifted the heads' outputs systematically in that exploration (photons about −1 %
to −2 %, −3 % for the brightest; positions by 0.003–0.005 px; background and σ by a few tenths of a percent), and
the shifts were nearly the same on other windows of the same physics. Each output channel's raw value (before its
sigmoid or tanh) is mapped by ``a * raw + b``, fitted by least squares to the fp32 network's raw value on the
calibration windows, over the pixels where the channel is used: p > 0.4 for an emitter's photons, offsets and σ,
p > 0.05 for the detection logit, every pixel for the background. What remains is the rounding noise of int8 (no
bias): ``benchmarks/results/cpu_engines.md`` measures it against fp32 and against the ground truth.

Where it runs: ``write_in_child`` quantizes in a child process, once per machine and checkpoint (the engine keeps
the files). NNCF's statistics took about 540 MiB of RssAnon for a moment on top of the run's (957 MiB against 417
for a run with the files there, 128² frames); in a child process that memory is returned when it exits, before the
run reads its first block, and the run's own peak stays within its plan.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from decode_mem.model.config import CHANNEL_INDEX, N_OUTPUT_CHANNELS
from decode_mem.model.engine import INT8_FILES

CALIBRATION_WINDOWS = 64  # simulated 3-frame windows (more changed neither the biases nor the noise measured)
CALIBRATION_SIDE = 64  # px
CALIBRATION_SEED = 1
KEPT_FRAME = (r".*frame_unet\.encoders\.0\.0/.*",)  # OpenVINO node names (``engine.openvino_models``) kept in float
KEPT_TEMPORAL = (r"^aten::.*",)  # the heads' last convs (``net._head_fp32_out``) and element-wise ops: unnamed
DETECTED_P = 0.4  # pixels whose emitter parameters are used (the default detection threshold's order)
NEAR_P = 0.05  # pixels where the detection logit decides something


def calibration_windows(net: Any, simulation: dict[str, Any], n: int = CALIBRATION_WINDOWS,
                        seed: int = CALIBRATION_SEED) -> torch.Tensor:
    """``n`` simulated windows of the training physics ``simulation`` (a checkpoint's dict), normalized as the
    executor normalizes frames: ``(n, 3, C, side, side)`` float32 on the CPU."""
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.dataset import simulate_windows

    cfg = dataclasses.replace(SimulationConfig.from_dict(simulation), frame_size=(CALIBRATION_SIDE, CALIBRATION_SIDE))
    with warnings.catch_warnings():  # a crowded window keeps its brightest emitters: irrelevant for calibration
        warnings.simplefilter("ignore", RuntimeWarning)
        wb = simulate_windows(cfg, n, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return net.normalize(wb.frames, net.frame_level(wb.frames), wb.read_var[:, None]).float().contiguous()


def quantize(frame_model: Any, temporal_raw_model: Any, net: Any, windows: torch.Tensor) -> tuple[Any, Any]:
    """The two OpenVINO models (frame features; temporal part with raw head outputs) quantized to int8 by NNCF on
    ``windows`` (``calibration_windows``); NNCF's log and progress bars are kept off the console."""
    with warnings.catch_warnings():  # its dependencies warn about their own deprecations on import
        warnings.simplefilter("ignore")
        import nncf

    n, _, c, h, w = windows.shape
    with torch.no_grad():
        feats = net.frame_features(windows.reshape(-1, c, h, w))
        feats = feats.view(n, 3, *feats.shape[1:])
    frames = nncf.Dataset([windows[i].numpy() for i in range(n)])
    triples = nncf.Dataset([{j: feats[i, j:j + 1].numpy() for j in range(3)} for i in range(n)])
    level = logging.getLogger("nncf").level
    nncf.set_log_level(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            kw = {"subset_size": n, "preset": nncf.QuantizationPreset.MIXED}
            q_frame = nncf.quantize(frame_model, frames, ignored_scope=nncf.IgnoredScope(patterns=list(KEPT_FRAME),
                                                                                        validate=False), **kw)
            q_temporal = nncf.quantize(temporal_raw_model, triples,
                                       ignored_scope=nncf.IgnoredScope(patterns=list(KEPT_TEMPORAL), validate=False),
                                       **kw)
    finally:
        nncf.set_log_level(level)
    return q_frame, q_temporal


def fit_correction(raw_float: torch.Tensor, raw_int8: torch.Tensor) -> np.ndarray:
    """Per output channel ``(a, b)`` with ``a * raw_int8 + b`` closest to ``raw_float`` (least squares) over the
    pixels where the channel is used (module docstring); ``(N_OUTPUT_CHANNELS, 2)``. A channel with fewer than 16
    such pixels, or no spread in them (a 2-D model's z), keeps (1, 0)."""
    p = torch.sigmoid(raw_float[:, CHANNEL_INDEX["p_logit"]].double())
    masks = {"detected": p > DETECTED_P, "near": p > NEAR_P, "all": torch.ones_like(p, dtype=torch.bool)}
    coef = np.tile([1.0, 0.0], (N_OUTPUT_CHANNELS, 1))
    for ch in range(N_OUTPUT_CHANNELS):
        where = "near" if ch == CHANNEL_INDEX["p_logit"] else "all" if ch == CHANNEL_INDEX["bg"] else "detected"
        a = raw_int8[:, ch][masks[where]].double()
        b = raw_float[:, ch][masks[where]].double()
        if a.numel() < 16 or float(a.std()) == 0.0:
            continue
        design = torch.stack([a, torch.ones_like(a)], dim=1)
        coef[ch] = torch.linalg.lstsq(design, b[:, None]).solution[:, 0].numpy()
    return coef


def raw_outputs(net: Any, windows: torch.Tensor, frame_call: Any = None, temporal_call: Any = None) -> torch.Tensor:
    """The heads' raw outputs ``(n, 10, h, w)`` of ``windows``, by torch (default) or by the given calls
    (numpy in, numpy out, as an OpenVINO compiled model's)."""
    n, _, c, h, w = windows.shape
    with torch.no_grad():
        if frame_call is None:
            f = net.frame_features(windows.reshape(-1, c, h, w))
            f = f.view(n, 3, *f.shape[1:])
            return net.temporal_raw(f[:, 0], f[:, 1], f[:, 2])
        f = torch.from_numpy(frame_call(windows.reshape(-1, c, h, w).numpy()))
        f = f.view(n, 3, *f.shape[1:])
        return torch.from_numpy(temporal_call([f[:, j].contiguous().numpy() for j in range(3)]))


FILES = INT8_FILES  # what it writes (the engine reads them)


def write_quantized(net: Any, simulation: dict[str, Any], folder: Path, threads: int) -> None:
    """Quantize ``net`` calibrated on ``simulation`` and write ``FILES`` into ``folder``: both OpenVINO models and
    the correction (``{"a": [...], "b": [...]}``, per output channel)."""
    import openvino as ov

    from decode_mem.model.convert import openvino_models

    windows = calibration_windows(net, simulation)
    q_ff, q_tp = quantize(*openvino_models(net, raw=True), net, windows)
    core = ov.Core()
    cfg = {"INFERENCE_NUM_THREADS": int(threads), "INFERENCE_PRECISION_HINT": "f32", "NUM_STREAMS": 1}
    k_ff, k_tp = core.compile_model(q_ff, "CPU", cfg), core.compile_model(q_tp, "CPU", cfg)
    raw_q = raw_outputs(net, windows, lambda a: k_ff(a)[0], lambda t: k_tp(dict(enumerate(t)))[0])
    coef = fit_correction(raw_outputs(net, windows), raw_q)
    ov.save_model(q_ff, str(folder / "frame_features.xml"), compress_to_fp16=False)
    ov.save_model(q_tp, str(folder / "temporal_raw.xml"), compress_to_fp16=False)
    (folder / "correction.json").write_text(json.dumps({"a": coef[:, 0].tolist(), "b": coef[:, 1].tolist()}))


def write_in_child(net: Any, simulation: dict[str, Any], folder: Path, threads: int) -> None:
    """``write_quantized`` in a child process (module docstring: its memory is gone when it exits): the network
    and physics go to it through ``folder/input.pt``; a failure is a RuntimeError with the child's last line."""
    import torch

    folder = Path(folder)
    torch.save({"config": net.config, "state": {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()},
                "simulation": simulation, "threads": int(threads)}, folder / "input.pt")
    from decode_mem.model.convert import TELEMETRY_DECLINED  # NNCF's and OpenVINO's: the user asked for neither

    code = "import sys; from decode_mem.model.int8 import _child; _child(sys.argv[1])"
    done = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True,
                          env={**os.environ, **TELEMETRY_DECLINED})
    (folder / "input.pt").unlink(missing_ok=True)
    if done.returncode != 0:
        lines = [line for line in (done.stderr or "").splitlines() if line.strip()]
        raise RuntimeError(f"quantizing in a child process failed (exit {done.returncode}): "
                           f"{lines[-1] if lines else 'no message'}")


def _child(folder: str) -> None:
    """The child process of ``write_in_child``."""
    import torch

    from decode_mem.model.net import DecodeNet

    given = torch.load(Path(folder) / "input.pt", weights_only=False)
    torch.set_num_threads(given["threads"])
    net = DecodeNet(given["config"])
    net.load_state_dict(given["state"])
    write_quantized(net.eval(), given["simulation"], Path(folder), given["threads"])
