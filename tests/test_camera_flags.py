"""The camera as a user types it, the same in every job: a preset name stays a preset when a folder has its name, a
camera number off by a factor 1000 (µm given as nm) is refused in one line naming the flag and the likely unit,
before any work and with nothing written, and a bad number is named by its flag, not by a YAML key."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from decode_mem.io.camera import Camera, camera_fields

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample" / "stack.tif"
LOCS = REPO / "data" / "sample" / "gt.csv"

# every job that takes camera flags, with the least it needs besides them
JOBS = {
    "infer": [str(SAMPLE), "--out", "{out}"],
    "calibrate": [str(SAMPLE), "--out", "{out}/calib.yaml"],
    "fit": [str(SAMPLE), "--out", "{out}"],
    "psf": [str(SAMPLE), "--z_step", "20", "--out", "{out}/psf.h5"],
    "simulate": ["--frames", "2", "--size", "16", "16", "--out", "{out}/sim.tif"],
    "evaluate": [str(LOCS), "--no_truth", "--out", "{out}"],
    "render": [str(LOCS), "--out", "{out}/image.png"],
    "link": [str(LOCS), "--out", "{out}"],
    "drift": [str(LOCS), "--out", "{out}"],
}


def _main(job: str):
    return importlib.import_module(f"decode_mem.{job}.__main__").main


@pytest.mark.parametrize("job", list(JOBS))
def test_a_pixel_size_in_um_is_refused_naming_the_flag_and_the_unit(job, tmp_path, capsys):
    out = tmp_path / "out"
    argv = [a.format(out=out) for a in JOBS[job]] + ["--pixel_size", "0.16"]
    assert _main(job)(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: --pixel_size is 0.16 nm"), err
    assert "160 nm" in err and "µm" in err
    assert not out.exists()  # checked before any work: nothing written


@pytest.mark.parametrize(("flag", "value", "words"), [("--em_gain", "-5", "--em_gain must be a positive number"),
                                                      ("--qe", "90", "(a percentage? 90 % is 0.9)"),
                                                      ("--pixel_size", "160000", "in pm, as it was probably meant"),
                                                      ("--read_noise", "-1", "--read_noise must be >= 0")])
def test_a_bad_camera_number_is_named_by_its_flag(flag, value, words, tmp_path, capsys):
    assert _main("infer")([str(SAMPLE), "--out", str(tmp_path / "out"), flag, value]) == 2
    err = capsys.readouterr().err
    assert words in err and "camera." not in err, err


def test_a_camera_yaml_says_its_own_key():
    with pytest.raises(Exception, match=r"camera\.pixel_size is 0\.1 nm"):
        Camera(pixel_size=0.1)


def test_a_preset_stays_a_preset_when_a_folder_has_its_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("scmos", "emccd"):
        (tmp_path / name).mkdir()  # the output folder of the run before: `--camera scmos --out scmos`
        assert camera_fields(name) == {"kind": name}
    from decode_mem.io.metadata import CameraRequest

    request = CameraRequest.from_value("scmos")
    assert request.given_label == "preset scmos" and request.resolve()[0] == Camera.scmos()
    (tmp_path / "cam.yaml").write_text("camera:\n  kind: scmos\n  baseline: 400\n")
    assert camera_fields("cam.yaml") == {"kind": "scmos", "baseline": 400.0}


def test_calibrate_runs_twice_into_a_folder_named_after_the_preset(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = [str(SAMPLE), "--camera", "emccd", "--out", "emccd/calib.yaml", "--frames", "20", "--quiet"]
    (tmp_path / "emccd").mkdir()
    assert _main("calibrate")(argv) == 0
    assert _main("calibrate")(argv) == 0, capsys.readouterr().err
