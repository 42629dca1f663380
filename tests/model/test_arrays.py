"""``model.arrays``, the network's input and output transforms on numpy arrays (a CPU runtime's run): equal to
``DecodeNet``'s on tensors, so that a run with arrays localizes as the tensor path does."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from decode_mem.model import DecodeNet, ModelConfig
from decode_mem.model import arrays as model_arrays


def _net(**changes) -> DecodeNet:
    torch.manual_seed(0)
    return DecodeNet(dataclasses.replace(ModelConfig.tiny(), **changes)).eval()


@pytest.mark.parametrize("transform", ["anscombe", "linear"])
@pytest.mark.parametrize("read_var", [None, 2.5, "map"])
def test_levels_and_normalized_input_equal_the_networks(transform, read_var) -> None:
    """Photons from below 0 to thousands (an EMCCD's negative counts included), even and odd sample sizes (torch's
    median takes the lower middle value): the levels and every channel within float32 rounding. Not bit for bit:
    numpy's square root is correctly rounded, torch's on a CPU is not always (1 ulp apart for 16 % of values on the
    2-core AMD EPYC), and the read noise channel's log1p is numpy's."""
    net = _net(input_transform=transform)
    rng = np.random.default_rng(1)
    x = rng.gamma(2.0, 50.0, (2, 3, 20, 24)).astype(np.float32) - 20
    rv = rng.uniform(0, 9, (20, 24)).astype(np.float32) if read_var == "map" else read_var
    ulp = float(np.spacing(model_arrays.anscombe(x).max()))  # of the largest transformed value
    for sample in (x[..., ::2, ::2], x[..., ::3, ::5]):  # 120 and 35 values per frame
        ref = net.level_from_sample(torch.from_numpy(sample)).numpy()
        got = model_arrays.level_from_sample(net.config, sample)
        assert got.dtype == np.float32 and got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=0, atol=ulp)
    level = net.level_from_sample(torch.from_numpy(x[..., ::2, ::2])).numpy()  # the same levels for both below
    got = model_arrays.normalize(net.config, x, level, rv)
    want = net.normalize(torch.from_numpy(x), torch.from_numpy(level),
                         None if rv is None else torch.as_tensor(rv)).numpy()
    assert got.dtype == np.float32 and got.shape == want.shape
    if transform == "linear":
        np.testing.assert_array_equal(got, want)
        return
    np.testing.assert_allclose(got[..., 0, :, :], want[..., 0, :, :], rtol=0, atol=2 * ulp / net.config.input_scale)
    # log1p of numpy and of torch, each within an ulp or two of the truth on any CPU's vector code
    np.testing.assert_allclose(got[..., 1, :, :], want[..., 1, :, :], rtol=4 * np.finfo(np.float32).eps, atol=0)
    np.testing.assert_array_equal(got[..., 2, :, :], want[..., 2, :, :])
    assert np.abs(got[..., 0, :, :] - want[..., 0, :, :]).max() < 1e-5  # and far from a level's worth


@pytest.mark.parametrize("changes", [{}, {"use_z": True, "bg_param": "linear"}])
def test_the_activation_in_place_equals_the_networks(changes) -> None:
    """Raw head outputs over the range the heads give (saturated sigmoids and tanh included): the physical units of
    ``DecodeNet.activate`` within float32 rounding, written over the array it is given."""
    net = _net(**changes)
    raw = np.random.default_rng(2).normal(0, 6, (3, 10, 8, 9)).astype(np.float32)
    want = net.activate(torch.from_numpy(raw.copy())).numpy()
    given = raw.copy()
    got = model_arrays.activate_in_place(net.config, given)
    assert got is given
    np.testing.assert_array_equal(got[:, 0], raw[:, 0])  # the logit is left as it is
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_field_dependent_model_is_not_normalized_here() -> None:
    net = _net()
    cfg = dataclasses.replace(net.config, field_shape=(64, 64))
    with pytest.raises(ValueError, match="across the field"):
        model_arrays.normalize(cfg, np.zeros((1, 8, 8), np.float32), np.zeros(1, np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_expit_is_the_logistic_function_in_the_arrays_precision(dtype) -> None:
    """numpy's ``expit`` (a run's start without scipy.special): torch's sigmoid within a few ulp of the result, in the
    input's precision; saturated ends exact without overflow warnings; ``out`` may be the input itself."""
    x = np.concatenate([np.random.default_rng(3).normal(0, 8, 10000), [-1e4, -100.0, 0.0, 100.0, 1e4, -np.inf,
                                                                        np.inf]]).astype(dtype)
    want = torch.sigmoid(torch.from_numpy(x.astype(np.float64))).numpy()
    with np.errstate(all="raise"):
        got = model_arrays.expit(x)
    assert got.dtype == dtype and got is not x
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(got, want, rtol=4 * eps, atol=np.finfo(dtype).tiny)
    assert got[-7] == 0.0 and got[-1] == 1.0 and got[-2] == 0.0 and got[-5] == 0.5
    again = x.copy()
    assert model_arrays.expit(again, out=again) is again
    np.testing.assert_array_equal(again, got)
