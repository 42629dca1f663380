"""One camera vocabulary in every job: ``--camera emccd|scmos|cam.yaml``, the preset filling what a YAML leaves
out, and ``em_gain`` 1 meaning a read-out without EM register (not the EMCCD's 74.4 e- read noise)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from decode_mem.errors import ConfigError
from decode_mem.io.camera import Camera, camera_fields, with_fields
from decode_mem.io.metadata import CameraRequest, resolve_camera


def test_presets_and_yaml_are_the_same_words_everywhere(tmp_path: Path) -> None:
    assert camera_fields("emccd") == {"kind": "emccd"} and camera_fields("scmos") == {"kind": "scmos"}
    cam = tmp_path / "cam.yaml"
    cam.write_text(yaml.safe_dump({"camera": {"kind": "scmos", "baseline": 400.0}}))
    assert camera_fields(str(cam)) == {"kind": "scmos", "baseline": 400.0}
    with pytest.raises(ConfigError, match=r"--camera nikon: neither a preset \(emccd or scmos\) nor a camera YAML"):
        camera_fields("nikon")


def test_a_yaml_of_another_kind_takes_that_kinds_preset_for_what_it_leaves_out() -> None:
    cam = with_fields(Camera.emccd(), {"kind": "scmos", "baseline": 400.0})
    assert cam.kind == "scmos" and cam.baseline == 400.0 and cam.read_noise == Camera.scmos().read_noise
    assert cam.em_gain == 1.0 and cam.e_per_adu == Camera.scmos().e_per_adu


def test_em_gain_1_without_read_noise_is_a_readout_without_em_register() -> None:
    cam = with_fields(Camera.emccd(), {"em_gain": 1.0})
    assert cam.kind == "scmos" and cam.read_noise == Camera.scmos().read_noise == 1.6  # not 74.4
    assert with_fields(Camera.emccd(), {"em_gain": 1.0, "read_noise": 6.0}).read_noise == 6.0
    kept = with_fields(Camera.emccd(), {"em_gain": 1.0, "kind": "emccd"})  # said explicitly: kept as said
    assert kept.kind == "emccd" and kept.read_noise == 74.4
    camera, sources = resolve_camera(flags={"em_gain": 1.0})
    assert camera.read_noise == 1.6 and sources["read_noise"] == "default (scmos)"
    assert sources["kind"] == "em_gain 1: no EM register" and sources["em_gain"] == "flag"


def test_infer_takes_the_presets_and_its_flags(tmp_path: Path) -> None:
    from decode_mem.infer.__main__ import build_parser, config_from_args

    def camera(*flags: str) -> Camera | None:
        return config_from_args(build_parser().parse_args(["s.tif", "--out", str(tmp_path), *flags])).camera

    assert camera("--camera", "scmos") == "scmos" and camera("--camera", "emccd") == "emccd"  # resolved per stack
    assert CameraRequest.from_value("scmos").resolve()[0] == Camera.scmos()
    assert CameraRequest.from_value("emccd").resolve()[0] == Camera.emccd()
    assert camera() is None  # the file's metadata, then the model's camera
    cfg = config_from_args(build_parser().parse_args(["s.tif", "--out", str(tmp_path), "--em_gain", "1"]))
    assert cfg.camera_overrides == {"em_gain": 1.0}  # applied to the model's camera by with_fields in the run
