"""Self-describing checkpoints: weights plus everything inference needs, saved atomically, loaded strictly.

A model trained on a PSF file (``psf: spline``) carries that PSF in the checkpoint (``meta["psf"]``: the spline's
coefficients and fields, a few MB), so that the checkpoint alone knows its PSF (the domain check fits the movie's
spots with it) wherever it is copied; ``meta["psf"]["relative"]`` is the file's path relative to the checkpoint,
so that a checkpoint moved together with its ``psf.h5`` also finds the file (the training settings name it).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from decode_mem.config import resolve_device
from decode_mem.errors import CheckpointError, ConfigError, exception_line
from decode_mem.io.atomic import atomic_output
from decode_mem.io.camera import Camera
from decode_mem.io.psf_file import SplineData
from decode_mem.model.choice import SHIPPED_MODEL
from decode_mem.model.net import DecodeNet, ModelConfig
from decode_mem.model.trained import TrainedModel

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
REQUIRED_KEYS = ("format_version", "model_config", "model", "meta")
# model_config keys added after format 1, with the values that reproduce a format-1 network
FORMAT_1_MODEL = {"input_transform": "linear", "bg_param": "linear"}
PSF_FIELDS = ("x0", "y0", "z0", "dz", "pixel_size", "source", "upsample")


def save_checkpoint(path: str | os.PathLike, *, net: DecodeNet, camera: Camera, simulation: dict[str, Any],
                    step: int, train_state: dict[str, Any] | None = None) -> Path:
    """Write a checkpoint atomically. ``train_state`` (optimizer, scaler, ...) is only needed to resume.

    ``simulation``: the training SimulationConfig as a dict; its envelope is stored beside it.
    """
    state = {
        "format_version": FORMAT_VERSION,
        "model_config": net.config.to_dict(),
        "model": net.state_dict(),
        "meta": {
            "camera": camera.without_maps().to_dict(),
            "simulation": simulation,
            "envelope": _envelope(simulation, path),
            "receptive_field": int(net.receptive_field()),
            "downsample_factor": int(net.downsample_factor),
            "step": int(step),
            **({"psf": _psf_meta(simulation, path)} if simulation.get("psf") == "spline" else {}),
        },
        "train_state": train_state,
    }
    path = Path(path)
    with atomic_output(path) as tmp:
        torch.save(state, tmp)
    return path


def load_checkpoint(path: str | os.PathLike, *, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read and validate a checkpoint; any problem is a CheckpointError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    with open(path, "rb") as f:
        head = f.read(4)
    if not head.startswith((b"PK\x03\x04", b"\x80")):  # torch.save writes a zip archive (older ones: a pickle)
        raise CheckpointError(f"{path}: not a decode_mem checkpoint (not a PyTorch checkpoint file: "
                              + ("it is empty)" if not head else "a model is a .pt file saved by decode_mem)"))
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols of foreign files: the error says it
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises many types for truncated / foreign files
        # one short line, and never torch's advice to load with weights_only=False (unsafe for files from others)
        text = str(e)
        if "Unsupported global" in text:
            reason = "it holds Python objects a decode_mem checkpoint never has"
        elif "weights_only" in text or "Unsupported operand" in text or "invalid load key" in text:
            reason = "not a PyTorch checkpoint file"
        else:
            reason = exception_line(e, with_type=False, limit=160)
        raise CheckpointError(f"{path}: not a decode_mem checkpoint ({reason})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: not a decode_mem checkpoint (top level is {type(state).__name__})")
    missing = [k for k in REQUIRED_KEYS if k not in state]
    if missing:
        raise CheckpointError(f"{path}: not a decode_mem checkpoint, missing {missing}")
    if state["format_version"] not in READABLE_VERSIONS:
        raise CheckpointError(f"{path}: checkpoint format {state['format_version']!r}, this version reads "
                              f"{READABLE_VERSIONS}")
    if state["format_version"] == 1:  # upgrade in memory: the settings format-1 networks were made with
        state["model_config"] = {**FORMAT_1_MODEL, **state["model_config"]}
        state["meta"] = {**state["meta"], "envelope": _envelope(state["meta"].get("simulation", {}), path)}
        state["format_version"] = FORMAT_VERSION
    _find_psf_file(state["meta"], path)
    if isinstance(state["model_config"], dict) and "sigma_photons_eps" not in state["model_config"]:
        # weights trained against the floor sigma_eps * photon_scale keep it (their sigma head saturates there)
        cfg = state["model_config"]
        state["model_config"] = {**cfg, "sigma_photons_eps": ModelConfig.legacy_sigma_photons_eps(cfg)}
    return state


def _psf_meta(simulation: dict[str, Any], path: str | os.PathLike) -> dict[str, Any]:
    """The PSF file of a ``psf: spline`` training, as checkpoint metadata (tensors and plain values). The spline
    is the one the training renders with (read once per unchanged file, ``simulate.config.file_spline``): a
    checkpoint every few steps reads no coefficients again."""
    from decode_mem.simulate.config import SimulationConfig, file_field, file_spline

    file = Path(str(simulation.get("psf_file") or ""))
    try:
        spline = file_spline(str(file))
    except ConfigError as e:
        raise CheckpointError(f"{path}: the model's PSF cannot be stored: {e}") from e
    data = spline.data
    out: dict[str, Any] = {"file": str(file), "relative": os.path.relpath(file.resolve(), Path(path).resolve().parent),
                           "coeff": spline.coeff, "z_range": list(data.z_range)}
    out.update({k: getattr(data, k) for k in PSF_FIELDS})
    for name in ("width_z", "width_x", "width_y"):
        value = getattr(data, name)
        if value is not None:
            out[name] = [float(v) for v in value]
    if SimulationConfig.from_dict(simulation).field_shape is not None:  # a PSF that changes across the field
        out["field"] = file_field(str(file)).field.as_meta()
    return out


def _find_psf_file(meta: dict[str, Any], path: Path) -> None:
    """A ``psf: spline`` model whose PSF file is not where training read it: the same path relative to the
    checkpoint (the two moved together) becomes the settings' ``psf_file`` when it is there."""
    sim, psf = meta.get("simulation"), meta.get("psf")
    if not isinstance(sim, dict) or sim.get("psf") != "spline" or not isinstance(psf, dict):
        return
    if sim.get("psf_file") and Path(sim["psf_file"]).is_file():
        return
    moved = path.resolve().parent / str(psf.get("relative", ""))
    if psf.get("relative") and moved.is_file():
        meta["simulation"] = {**sim, "psf_file": str(moved)}


def _psf_data(meta: dict[str, Any], path: Path) -> SplineData | None:
    """The spline PSF a checkpoint holds (None for models without one)."""
    psf = meta.get("psf")
    if not isinstance(psf, dict):
        return None
    try:
        widths = {n: np.asarray(psf[n], np.float64) if psf.get(n) is not None else None
                  for n in ("width_z", "width_x", "width_y")}
        return SplineData(coeff=psf["coeff"].numpy(), z_range=tuple(psf["z_range"]), **widths,
                          **{k: psf[k] for k in PSF_FIELDS})
    except (ConfigError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{path}: bad PSF in the checkpoint: {e}") from e


def _psf_field(meta: dict[str, Any], path: Path) -> Any:
    """How the checkpoint's PSF changes across the field (``FieldPsfData``), or None."""
    psf = meta.get("psf")
    if not isinstance(psf, dict) or not isinstance(psf.get("field"), dict):
        return None
    from decode_mem.io.field_psf_file import FieldPsfData

    try:
        return FieldPsfData.from_meta(psf["field"])
    except (ConfigError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{path}: bad field-dependent PSF in the checkpoint: {e}") from e


def _envelope(simulation: dict[str, Any], path: str | os.PathLike) -> dict[str, Any]:
    from decode_mem.simulate.config import SimulationConfig

    try:
        return SimulationConfig.from_dict(simulation).envelope()
    except (ConfigError, TypeError) as e:
        raise CheckpointError(f"{path}: bad simulation settings: {e}") from e


def build_net(state: dict[str, Any], path: str | os.PathLike) -> DecodeNet:
    """The network of a loaded checkpoint, weights in place; mismatches are CheckpointErrors (one line). A model
    config that asks for a network far larger than the file's weights (``features: 1000000``, edited) is refused
    before that memory is allocated (``_check_size``)."""
    try:
        config = ModelConfig.from_dict(state["model_config"])
        weights = state["model"]
        if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
            raise CheckpointError(f"{path}: weights do not match the model config: the weights are not tensors")
        _check_size(config, weights, path)
        net = DecodeNet(config)
        net.load_state_dict(weights)
    except CheckpointError:
        raise
    except (ConfigError, RuntimeError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{path}: weights do not match the model config: "
                              f"{exception_line(e, with_type=False)}") from e
    return net


def _check_size(config: ModelConfig, weights: dict[str, torch.Tensor], path: str | os.PathLike) -> None:
    """A CheckpointError where the network ``config`` describes has another number of weights than the file holds,
    found without building it: the count is a quadratic polynomial in ``features`` and ``inter_features`` with
    non-negative coefficients (every weight tensor's size is a product of at most two channel counts), so the
    count at (1, 1) times max(features, inter_features)² bounds it, and six tiny networks give it exactly."""
    from dataclasses import replace

    def count(f: int, i: int) -> int:
        return sum(int(v.numel()) for v in DecodeNet(replace(config, features=f, inter_features=i)).state_dict()
                   .values())

    given = sum(int(v.numel()) for v in weights.values())
    f, i = config.features, config.inter_features
    if count(1, 1) * max(f, i) ** 2 <= 4 * given:  # no larger than a few times the file's weights: built, compared
        return
    points = [(1, 1), (2, 1), (1, 2), (3, 1), (1, 3), (2, 2)]
    terms = np.array([[1, a, b, a * a, b * b, a * b] for a, b in points], float)
    coeff = np.linalg.solve(terms, np.array([count(a, b) for a, b in points], float))
    wanted = round(float(np.dot(coeff, [1, f, i, f * f, i * i, f * i])))
    if wanted != given:
        raise CheckpointError(f"{path}: weights do not match the model config: it describes a network of {wanted} "
                              f"weights (features {f}, inter_features {i}), the file holds {given}")


def load_model(path: str | os.PathLike | None = None, *, device: str | torch.device = "cpu") -> TrainedModel:
    """The one way to load a trained model for inference (eval mode, on ``device``); None: the shipped model."""
    path = SHIPPED_MODEL if path is None else Path(path)
    state = load_checkpoint(path)
    net = build_net(state, path).to(resolve_device(device)).eval()
    meta = state["meta"]
    try:
        camera = Camera.from_dict(meta["camera"])
        return TrainedModel(net=net, camera=camera, simulation=dict(meta["simulation"]),
                            receptive_field=int(meta["receptive_field"]), step=int(meta["step"]), path=path,
                            envelope=dict(meta["envelope"]), psf=_psf_data(meta, path),
                            psf_field=_psf_field(meta, path))
    except (ConfigError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: bad metadata: {e}") from e
