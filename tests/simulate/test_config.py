"""SimulationConfig: defaults, validation with clear messages, YAML round trip."""

from __future__ import annotations

import pytest
import yaml

from decode_mem.errors import ConfigError
from decode_mem.io.camera import Camera
from decode_mem.simulate import AstigmatismCalibration, SimulationConfig


def test_defaults_are_the_documented_challenge_like_setup() -> None:
    cfg = SimulationConfig()
    assert cfg.frame_size == (64, 64)
    assert cfg.camera == Camera.emccd()
    assert cfg.psf == "gauss2d" and cfg.psf_sigma == (1.0, 1.0)
    assert cfg.bg == (100.0, 100.0)
    # 64x64 px of 100 nm = 40.96 µm² -> ~41 emitters per frame at 1/µm²
    assert cfg.expected_in_frame == pytest.approx(40.96)
    assert cfg.k_max % 8 == 0 and cfg.k_max > cfg.expected_in_frame + 6 * cfg.expected_in_frame**0.5
    assert cfg.patch_size == 9  # 2*ceil(4*1.0)+1


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({"density": -1.0}, "density"),
        ({"frame_size": (0, 64)}, "frame_size"),
        ({"frame_size": (64, -3)}, "frame_size"),
        ({"psf": "airy"}, "psf"),
        ({"on_time": 0}, "on_time"),
        ({"photons_mean": 0}, "photons_mean"),
        ({"photons_std": -1}, "photons_std"),
        ({"photons_dist": "poisson"}, "photons_dist"),
        ({"bg": (150, 90)}, "bg"),
        ({"bg": -1}, "bg"),
        ({"bg_mode": "wavy"}, "bg_mode"),
        ({"psf_sigma": 0}, "psf_sigma"),
        ({"z_range": (500, -500)}, "z_range"),
        ({"margin": -1}, "margin"),
        ({"max_emitters": 0}, "max_emitters"),
        ({"camera": "ccd"}, "camera"),
        ({"astigmatism": {"depth": (280, 0)}}, "astigmatism.depth"),
        ({"density": "lots"}, "density"),
    ],
)
def test_bad_parameters_raise_config_error_naming_the_parameter(params: dict, names: str) -> None:
    with pytest.raises(ConfigError, match=rf"simulation\.{names}"):
        SimulationConfig(**params)


def test_unknown_key_is_named_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'densty'.*did you mean 'density'"):
        SimulationConfig.from_dict({"densty": 2.0})


def test_yaml_round_trip_and_presets() -> None:
    cfg = SimulationConfig(frame_size=(32, 40), density=2.5, bg=(90, 150), psf="astig3d", psf_sigma=(1.1, 1.2),
                           astigmatism=AstigmatismCalibration(focal_offset=(300, -300)), camera=Camera.scmos())
    text = yaml.safe_dump({"simulation": cfg.to_dict()})
    back = SimulationConfig.from_dict(yaml.safe_load(text)["simulation"])
    assert back == cfg
    assert SimulationConfig.from_dict({"camera": "scmos"}).camera == Camera.scmos()
    assert SimulationConfig.from_dict({"bg": 120, "psf_sigma": 1.3}).bg == (120.0, 120.0)
    assert SimulationConfig.from_dict({"astigmatism": {"depth": 400}}).astigmatism.depth == (400.0, 400.0)


def test_rates_follow_the_density() -> None:
    cfg = SimulationConfig(frame_size=(50, 50), margin=0.0, density=2.0, on_time=3.0)
    assert cfg.emitters_per_frame == pytest.approx(2.0 * 25.0)  # 50x50 px of 100 nm = 25 µm²
    assert cfg.start_rate * (cfg.on_time + 1) == pytest.approx(cfg.emitters_per_frame)
    assert SimulationConfig(max_emitters=7).k_max == 7


def test_package_exports_resolve() -> None:
    import decode_mem.simulate as sim

    for name in sim.__all__:
        assert getattr(sim, name).__name__ == name
    with pytest.raises(AttributeError):
        _ = sim.no_such_name
