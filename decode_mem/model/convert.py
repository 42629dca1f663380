"""The two sub-networks as torch modules and example inputs, converted for the CPU runtimes (``model.engine``):
OpenVINO's models and ONNX bytes. Imported only where a network is converted (a first run on a machine), so a
repeat run that reads the converted files needs no torch."""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


def network_itself(net: Any) -> nn.Module:
    """The network a converter traces: a ``KnownNetwork`` (a repeat run's stand-in, ``model.trained``) loaded here,
    before the trace. Loaded inside it, its construction was recorded into the graph (the random initialization's
    ``aten::uniform``, weights as constants that require grad) and every conversion failed: a model first run with
    ``--engine torch`` then ran on torch in every later ``auto`` run on that machine. A stand-in is told by its
    ``loaded`` method (``model.trained`` imports this module's caller: no import of it here)."""
    return net.loaded() if callable(getattr(type(net), "loaded", None)) else net


class FrameFeatures(nn.Module):
    def __init__(self, net: Any) -> None:
        super().__init__()
        self.net = network_itself(net)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.frame_features(x)


class Temporal(nn.Module):
    def __init__(self, net: Any) -> None:
        super().__init__()
        self.net = network_itself(net)

    def forward(self, f_prev: torch.Tensor, f_mid: torch.Tensor, f_next: torch.Tensor) -> torch.Tensor:
        return self.net.temporal(f_prev, f_mid, f_next)


class TemporalRaw(Temporal):
    def forward(self, f_prev: torch.Tensor, f_mid: torch.Tensor, f_next: torch.Tensor) -> torch.Tensor:
        return self.net.temporal_raw(f_prev, f_mid, f_next)


def examples(net: Any) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """Small example inputs of both sub-networks (a side the down-sampling divides) on the CPU."""
    side, r = 4 * int(net.downsample_factor), int(net.config.unshuffle)
    c, f = int(net.config.input_channels), int(net.config.feature_channels)  # features as frame_features gives them
    return torch.zeros(2, c, side, side), tuple(torch.zeros(2, f, side // r, side // r) for _ in range(3))


def openvino_models(net: Any, raw: bool = False) -> tuple[Any, Any]:
    """Both sub-networks as OpenVINO models with dynamic batch and tile size (``raw``: the temporal part without
    its output activations, ``DecodeNet.temporal_raw``)."""
    import openvino as ov

    x, feats = examples(net)
    c, f = x.shape[1], feats[0].shape[1]
    with warnings.catch_warnings(), torch.no_grad(), _openvino_telemetry_declined():
        warnings.simplefilter("ignore")  # tracing warns about the shape checks (constants)
        # share_weights=False: models that own copies of the weights. Sharing torch's memory, destroying a model
        # freed torch tensors from OpenVINO's destructor and could deadlock on the GIL (a hang in the suite's
        # auto-engine test, 2026-12-06: py-spy showed ov::Model::~Model -> THPVariable_clear waiting)
        ff = ov.convert_model(FrameFeatures(net).eval(), example_input=x, input=[ov.PartialShape([-1, c, -1, -1])],
                              share_weights=False)
        tp = ov.convert_model((TemporalRaw if raw else Temporal)(net).eval(), example_input=feats,
                              input=[ov.PartialShape([-1, f, -1, -1])] * 3, share_weights=False)
    return ff, tp


TELEMETRY_DECLINED = {"CI": "true"}  # the environment in which openvino_telemetry (OpenVINO's, NNCF's) sends nothing


@contextlib.contextmanager
def _openvino_telemetry_declined() -> Iterator[None]:
    """OpenVINO's model conversion declines to send its usage telemetry inside (``openvino_telemetry`` declines where
    ``CI`` is 'true'; decode_mem converts a network for the user, who did not ask OpenVINO for it). Unasked, it sends
    from processes it forks out of a thread: in a process with threads a fork can inherit a held lock, and a suite run
    hung in ``compile_model`` beside such children (2026-12-07, py-spy: ``GA4Backend.send`` -> ``Process.start``)."""
    before = {name: os.environ.get(name) for name in TELEMETRY_DECLINED}
    os.environ.update(TELEMETRY_DECLINED)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def onnx_bytes(module: nn.Module, example: tuple[torch.Tensor, ...], inputs: list[str]) -> bytes:
    """``module`` exported to ONNX (opset 17) with dynamic batch and tile size, as bytes."""
    buf = io.BytesIO()
    axes = {name: {0: "n", 2: "h", 3: "w"} for name in (*inputs, "out")}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), example, buf, input_names=inputs, output_names=["out"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)
    return buf.getvalue()
