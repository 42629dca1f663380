"""``python -m decode_mem.calibrate``: files, table, exit codes, and a YAML that trains as it is."""

from __future__ import annotations

from pathlib import Path

import pytest
import tifffile
import yaml
from calibrate_helpers import movie

from decode_mem.calibrate.__main__ import main
from decode_mem.config import load_yaml
from decode_mem.io.camera import Camera

ESTIMATES = ("psf_sigma_px", "psf_sigma_nm", "background_photons", "background_spread", "photons_median",
             "density_per_um2", "on_time_frames")


@pytest.fixture(scope="module")
def movie_path(tmp_path_factory) -> Path:
    adu, _, _, _ = movie(1.3, 60.0, "scmos", seed=7)
    path = tmp_path_factory.mktemp("calib") / "movie.tif"
    tifffile.imwrite(path, adu[:60], imagej=True, resolution=(1 / 0.108, 1 / 0.108), metadata={"unit": "um"})
    return path


def test_writes_yaml_png_and_prints_a_table(movie_path: Path, tmp_path: Path, capsys) -> None:
    out, png = tmp_path / "calib.yaml", tmp_path / "calib.png"
    assert main([str(movie_path), "--camera", "scmos", "--out", str(out), "--png", str(png), "--frames", "40"]) == 0
    printed = capsys.readouterr()
    assert "psf_sigma_px" in printed.out and "camera check: ok" in printed.out and "wrote" in printed.out
    assert printed.err == ""  # the right camera: no warning
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calib.png", "calib.yaml"]  # nothing half-written left
    data = yaml.safe_load(out.read_text())
    for name in ESTIMATES:
        assert set(data["estimates"][name]) == {"value", "uncertainty"}
    assert data["estimates"]["psf_sigma_px"]["value"] == pytest.approx(1.3, rel=0.05)
    assert data["metadata_source"] == "imagej" and data["frames"]["used"] == 40
    assert data["camera_sources"]["pixel_size"] == "file metadata (imagej)"
    assert data["camera_sources"]["kind"] == "preset scmos"  # a preset's name, not "camera file"
    # the camera section is a camera YAML (for infer --camera), the train section a training config
    camera = Camera.from_dict(load_yaml(out, section="camera"))
    assert camera.kind == "scmos" and camera.pixel_size == pytest.approx(108.0)
    assert "model_coverage" in data


def test_the_yaml_trains_as_it_is(movie_path: Path, tmp_path: Path) -> None:
    from decode_mem.train.__main__ import main as train
    from decode_mem.train.config import load_train_config

    out = tmp_path / "calib.yaml"
    assert main([str(movie_path), "--camera", "scmos", "--out", str(out), "--frames", "40", "--quiet"]) == 0
    cfg = load_train_config(out)
    lo, hi = cfg.simulation.psf_sigma_range
    assert lo < 1.3 < hi and (lo + hi) / 2 == pytest.approx(1.3, rel=0.05)
    assert cfg.simulation.camera.kind == "scmos" and cfg.simulation.photons_dist == "loguniform"
    assert train(["--config", str(out), "--steps", "2", "--preset", "tiny", "--out", str(tmp_path / "run"),
                  "--batch_size", "2", "--quiet"]) == 0
    assert (tmp_path / "run" / "model.pt").is_file()


def test_flags_override_the_camera_file(movie_path: Path, tmp_path: Path) -> None:
    cam = tmp_path / "cam.yaml"
    cam.write_text(yaml.safe_dump({"camera": {"kind": "scmos", "e_per_adu": 0.5, "pixel_size": 90.0}}))
    out = tmp_path / "calib.yaml"
    assert main([str(movie_path), "--camera", str(cam), "--pixel_size", "100", "--out", str(out), "--frames", "20",
                 "--quiet"]) == 0
    data = yaml.safe_load(out.read_text())
    assert data["camera"]["pixel_size"] == 100.0 and data["camera_sources"]["pixel_size"] == "flag"
    assert data["camera_sources"]["e_per_adu"] == f"camera file {cam}"


def test_a_wrong_camera_is_warned_about_but_not_fatal(movie_path: Path, tmp_path: Path, capsys) -> None:
    assert main([str(movie_path), "--out", str(tmp_path / "c.yaml"), "--frames", "20", "--quiet"]) == 0  # EMCCD default
    err = capsys.readouterr().err
    assert err.startswith("warning: camera:") and "do not fit this movie" in err


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--frames", "0"], 2, "--frames"),
    (["--camera", "missing.yaml"], 2, "missing.yaml"),
    (["--camera", "BAD"], 2, "bad.yaml: camera: unknown key 'gian'"),  # the YAML file named
    (["--model", "missing.pt"], 2, "missing.pt"),
])
def test_bad_settings_exit_2(movie_path: Path, tmp_path: Path, capsys, args: list[str], code: int,
                             message: str) -> None:
    if "BAD" in args:
        bad = tmp_path / "bad.yaml"
        bad.write_text("camera: {gian: 3}\n")
        args = ["--camera", str(bad)]
    out = tmp_path / "c.yaml"
    assert main([str(movie_path), "--out", str(out), *args]) == code
    err = capsys.readouterr().err
    assert err.startswith("error:") and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("make", [lambda p: p.write_text("not an image"), lambda p: None])  # unreadable, missing
def test_unreadable_or_missing_movie_exits_2_as_in_every_job(tmp_path: Path, capsys, make) -> None:
    bad = tmp_path / "bad.tif"
    make(bad)
    assert main([str(bad), "--out", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "bad.tif" in err[0]
    assert not (tmp_path / "c.yaml").exists()


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    from decode_mem.errors import StackError

    with pytest.raises(StackError):
        main([str(tmp_path / "missing.tif"), "--out", str(tmp_path / "c.yaml"), "--debug"])


def test_coverage_by_the_shipped_model_is_reported(movie_path: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "c.yaml"
    assert main([str(movie_path), "--camera", "scmos", "--out", str(out), "--frames", "20"]) == 0
    line = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("model"))
    coverage = yaml.safe_load(out.read_text())["model_coverage"]
    if "note" in coverage:  # no shipped model, or one without an envelope
        assert coverage["note"] in line
    else:  # σ 1.3 px, sCMOS, 60 photons/px: inside the generalist's envelope, outside the narrow model's
        from decode_mem.model.checkpoint import load_model

        env = load_model().envelope
        inside = env["psf_sigma_px"][0] <= 1.3 <= env["psf_sigma_px"][1] and "scmos" in env["camera_kinds"]
        if inside:
            assert coverage["covered"] is True and "does NOT cover" not in line and "cover" in line
        else:
            assert coverage["covered"] is False and "does NOT cover" in line
            assert any("PSF sigma" in s for s in coverage["outside"])


def test_help_lists_the_camera_flags_of_infer(capsys) -> None:
    from decode_mem.io.camera import CAMERA_FLAGS

    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert all(f"--{flag}" in text for flag in CAMERA_FLAGS)
