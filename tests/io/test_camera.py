"""Camera model: ADU <-> photons are inverse; invalid parameters are ConfigErrors naming the key."""

from __future__ import annotations

import numpy as np
import pytest

from decode_mem.errors import ConfigError
from decode_mem.io.camera import Camera


@pytest.mark.parametrize("camera", [Camera.emccd(), Camera.scmos(), Camera(baseline=0, em_gain=1, qe=1)],
                         ids=["emccd", "scmos", "ideal"])
def test_to_photons_inverts_to_adu(camera: Camera) -> None:
    photons = np.array([0.0, 1.0, 12.5, 1e4], np.float32)
    adu = camera.to_adu(photons)
    np.testing.assert_allclose(camera.to_photons(adu), photons, rtol=1e-5, atol=1e-3)
    assert camera.to_adu(0.0) == pytest.approx(camera.baseline)
    assert camera.to_photons(np.uint16(camera.baseline)) == pytest.approx(0.0)


def test_integer_adu_become_float32_photons() -> None:
    photons = Camera.emccd().to_photons(np.full((2, 3), 700, np.uint16))
    assert photons.dtype == np.float32 and photons.shape == (2, 3)
    assert photons[0, 0] == pytest.approx(600 / (0.9 * 300 / 45))


def test_torch_tensors_stay_tensors() -> None:
    torch = pytest.importorskip("torch")
    out = Camera.scmos().to_photons(torch.full((2,), 150, dtype=torch.int16))
    assert isinstance(out, torch.Tensor) and out.is_floating_point()


@pytest.mark.parametrize(
    ("params", "key"),
    [
        ({"e_per_adu": 0}, "e_per_adu"),
        ({"em_gain": -1}, "em_gain"),
        ({"qe": 1.5}, "qe"),
        ({"qe": float("nan")}, "qe"),
        ({"pixel_size": 0}, "pixel_size"),
        ({"read_noise": -0.1}, "read_noise"),
        ({"kind": "ccd"}, "kind"),
    ],
)
def test_bad_parameters_raise_config_error(params: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"camera\.{key}"):
        Camera(**params)


def test_from_dict_round_trip_and_unknown_keys() -> None:
    camera = Camera.scmos(pixel_size=65.0)
    assert Camera.from_dict(camera.to_dict()) == camera
    with pytest.raises(ConfigError, match=r"unknown key.*'gain'"):
        Camera.from_dict({"gain": 2.0})
