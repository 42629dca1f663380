"""The network's input and output transforms on numpy float32 arrays, for runs whose network a CPU runtime computes.

A runtime (OpenVINO, ONNX Runtime) takes and returns numpy arrays, so the work around it — each frame's level, the
normalized input, the int8 engine's activation of its corrected output — is done on arrays too, without torch
tensors (``tiling.executor`` with a runtime engine). These are the twins of ``DecodeNet.level_from_sample``,
``DecodeNet.normalize`` and ``DecodeNet.activate``: the same operations in the same order and precision, held equal
to them by ``tests/model/test_arrays.py``. Models whose PSF changes across the field (``field_shape``) are not
covered: their runs keep torch tensors.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from decode_mem.model.config import LEVEL_UNIT


def expit(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The logistic function ``1 / (1 + exp(-x))`` elementwise, in ``x``'s float precision (``out``: where to write
    it, ``x`` itself allowed). scipy.special's ``expit`` computes the same formula; importing scipy.special takes
    ~0.15 s of a run's start, and numpy's exp is faster here. Within 4 float32 ulp of scipy's."""
    with np.errstate(over="ignore", under="ignore"):  # exp(-x) inf or 0 at the ends: the results 0 and 1, exact
        out = np.negative(x, out=out)
        np.exp(out, out=out)
        out += 1
        return np.reciprocal(out, out=out)


def anscombe(x: np.ndarray) -> np.ndarray:
    """``2·sqrt(max(x, 0) + 3/8)`` in float32 (``net._anscombe``)."""
    return 2.0 * np.sqrt(np.maximum(x, np.float32(0)) + np.float32(0.375))


def level_from_sample(config: Any, photons: np.ndarray) -> np.ndarray:
    """Frames' levels ``(...)`` from their sub-grids ``(..., h, w)`` in photons: the lower median of the transform,
    as torch's ``median`` takes (``DecodeNet.level_from_sample``)."""
    photons = np.asarray(photons, dtype=np.float32)
    if config.input_transform == "linear":
        return np.zeros(photons.shape[:-2], np.float32)
    v = anscombe(photons).reshape(*photons.shape[:-2], -1)
    k = (v.shape[-1] - 1) // 2
    return np.partition(v, k, axis=-1)[..., k]


def normalize(config: Any, x: np.ndarray, level: np.ndarray, read_var: Any = None) -> np.ndarray:
    """Frames in photons ``(..., H, W)`` -> network input ``(..., C, H, W)`` float32 (``DecodeNet.normalize`` with
    each frame's ``level`` given, broadcasting to ``(...)``; ``read_var`` a number or a map in photons²)."""
    x = np.asarray(x, dtype=np.float32)
    if config.field_shape is not None:
        raise ValueError("a model whose PSF changes across the field is normalized by DecodeNet.normalize")
    if config.input_transform == "linear":
        return ((x - config.input_offset) / config.input_scale)[..., None, :, :]
    level = np.asarray(level, dtype=np.float32)[..., None, None]
    frame = (anscombe(x) - level - config.input_offset) / config.input_scale
    noise = np.log1p(np.maximum(np.asarray(0.0 if read_var is None else read_var, np.float32), np.float32(0))) / 3.0
    return np.stack([frame, np.broadcast_to(noise, frame.shape), np.broadcast_to(level / LEVEL_UNIT, frame.shape)],
                    axis=-3)


def activate_in_place(config: Any, raw: np.ndarray) -> np.ndarray:
    """Raw head outputs ``(N, 10, ...)`` float32 -> physical units, written over ``raw`` (``DecodeNet.activate``)."""
    sigma_unit = np.asarray([config.photon_scale, 1.0, 1.0, config.z_scale], np.float32).reshape(1, 4, 1, 1)
    sigma_floor = np.asarray([config.sigma_photons_eps, config.sigma_eps, config.sigma_eps,
                              config.sigma_eps * config.z_scale], np.float32).reshape(1, 4, 1, 1)
    photons = raw[:, 1:2]
    expit(photons, out=photons)
    photons *= np.float32(config.photon_scale)
    np.tanh(raw[:, 2:4], out=raw[:, 2:4])
    if config.use_z:
        z = raw[:, 4:5]
        np.tanh(z, out=z)
        z *= np.float32(config.z_scale)
    else:
        raw[:, 4:5] = 0
    sig = raw[:, 5:9]
    expit(sig, out=sig)
    sig *= np.float32(config.sigma_max)
    sig *= sigma_unit
    sig += sigma_floor
    bg = raw[:, 9:10]
    expit(bg, out=bg)
    if config.bg_param == "sqrt":
        bg *= bg
    bg *= np.float32(config.bg_scale)
    return raw
