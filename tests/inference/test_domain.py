"""The domain check: movies that do not fit the shipped model's training envelope get one clear warning with the
numbers and the fix (and in <stem>.json), --strict turns it into an error that writes nothing, in-domain
movies stay silent; the real EMCCD movie is checked and localized."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tifffile

from decode_mem.infer import InferConfig, run_inference
from decode_mem.infer.__main__ import main
from decode_mem.infer.domain import check_domain
from decode_mem.io.camera import Camera
from decode_mem.io.localizations import read_localizations
from decode_mem.model.checkpoint import load_model
from decode_mem.simulate import SimulationConfig, simulate_movie

REAL = Path(__file__).resolve().parents[2] / "data" / "real" / "locan_dstorm_5frames.tif"  # see data/real/README.md


def _movie(tmp_path: Path, name: str, **sim) -> Path:
    cfg = SimulationConfig.from_dict({"frame_size": [96, 96], "density": 1.0, "margin": 6.0, **sim})
    adu, _, _ = simulate_movie(cfg, 12, seed=3)
    path = tmp_path / f"{name}.tif"
    tifffile.imwrite(path, adu)
    return path


@pytest.fixture(scope="module")
def model(shipped_model):
    return load_model(shipped_model)


def test_in_domain_movie_gives_no_warning(tmp_path: Path, model) -> None:
    path = _movie(tmp_path, "ok")  # the default EMCCD, sigma 1 px, 5000 photons, background 100: the model's own
    check = check_domain(tifffile.imread(path), model.camera, model.envelope)
    assert check.ok, check.warnings


def test_wrong_camera_out_of_envelope_psf_and_empty_stack_are_reported(tmp_path: Path, model) -> None:
    baseline0 = _movie(tmp_path, "b0", bg=20.0, camera={"baseline": 0.0})  # recorded with baseline 0 ADU
    check = check_domain(tifffile.imread(baseline0), model.camera, model.envelope)  # read as the default (100)
    assert check.camera_suspect and any("noise" in w or "below the camera baseline" in w for w in check.warnings)
    assert "--camera" in check.message("b0.tif")
    wide = _movie(tmp_path, "wide", psf_sigma=2.6, density=0.3)
    check = check_domain(tifffile.imread(wide), model.camera, model.envelope)
    assert any(w.startswith("PSF sigma 2.") for w in check.warnings), check.warnings
    assert not check.camera_suspect  # the right camera is not blamed for a wide PSF
    assert "decode_mem.fit" in check.message("wide.tif")
    empty = check_domain(np.zeros((4, 32, 32), np.uint16), model.camera, model.envelope)
    assert empty.warnings and "all pixels" in empty.warnings[0]


def test_warning_is_recorded_and_strict_writes_nothing(tmp_path: Path, shipped_model, capsys) -> None:
    wide = _movie(tmp_path, "wide", psf_sigma=2.6, density=0.3)
    common = [str(wide), "--model", str(shipped_model), "--chunk_size", "128", "--batch_size", "2", "--quiet",
              "--engine", "torch"]  # the domain check is the subject, not auto's first int8 build
    assert main([*common, "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "outside the model's domain" in err and "PSF sigma" in err
    summary = json.loads((tmp_path / "out" / "wide.json").read_text())
    assert any("PSF sigma" in w for w in summary["domain_warnings"])
    strict = tmp_path / "strict"
    assert main([*common, "--out", str(strict), "--strict"]) == 2
    assert "--strict" in capsys.readouterr().err
    assert not strict.exists() or not any(strict.iterdir())


def test_real_emccd_movie_is_checked_and_localized(tmp_path: Path, shipped_model) -> None:
    if not REAL.exists():
        pytest.skip("the real movie is not available")
    frames = tifffile.imread(REAL)
    model = load_model(shipped_model)
    # with the default camera (baseline 100 ADU) the real camera (offset ~486 ADU) is recognised as wrong
    check = check_domain(frames, model.camera, model.envelope)
    assert check.camera_suspect and any("noise" in w for w in check.warnings)
    # with a camera whose baseline fits, localization runs and gives finite positions inside the frame
    camera = Camera.emccd(baseline=float(np.percentile(frames, 5)), pixel_size=132.5)
    report = run_inference(InferConfig(inputs=(str(REAL),), out=str(tmp_path / "real"), model=str(shipped_model),
                                       camera=camera, chunk_size=128, batch_size=1))
    assert report.ok
    summary = json.loads((tmp_path / "real" / f"{REAL.stem}.json").read_text())
    assert summary["frames"] == 5 and "domain_warnings" in summary
    locs = read_localizations(tmp_path / "real" / f"{REAL.stem}.csv", pixel_size=132.5)
    assert len(locs) == summary["localizations"] > 20  # a dSTORM movie: many molecules on in every frame
    h, w = frames.shape[1:]
    x, y = locs["x"], locs["y"]  # px, pixel centres at integers
    assert np.isfinite(x).all() and np.isfinite(y).all()
    assert (x >= -0.5).all() and (x <= w - 0.5).all() and (y >= -0.5).all() and (y <= h - 0.5).all()
    assert set(np.unique(locs["frame"])) <= set(range(5)) and len(np.unique(locs["frame"])) == 5


def test_large_frames_are_checked_on_their_central_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check reads the central DOMAIN_SIDE px of large frames (its memory does not grow with the frame):
    a movie blank in the centre only is reported as blank; with per-pixel camera maps whole frames are read."""
    import decode_mem.infer.domain as domain

    monkeypatch.setattr(domain, "DOMAIN_SIDE", 32)
    movie = np.full((4, 64, 80), 500, dtype=np.uint16)
    movie[:, 16:48, 24:56] = 0  # exactly the central 32 x 32 px
    check = check_domain(movie, Camera(), {})
    assert check.camera_suspect and "all pixels" in check.warnings[0]
    movie[:, 16:48, 23] = 0
    movie[:, 15, 24:56] = 7  # outside the window: still blank inside it
    assert "all pixels" in check_domain(movie, Camera(), {}).warnings[0]

    class MapsCamera(Camera):
        has_maps = True

    whole = domain._central(movie.shape[1:], MapsCamera())
    assert whole == (slice(None), slice(None))
    assert domain._central((2048, 100), Camera()) == (slice(1008, 1040), slice(34, 66))


def test_a_movie_at_the_baseline_gets_the_camera_checks_sentences_without_nan() -> None:
    """Background at the camera baseline (no signal): the noise ratio cannot be measured (nan); the warning is
    the camera check's own sentence with finite numbers, not 'nanx'."""
    movie = np.random.default_rng(0).poisson(100, (20, 64, 64)).astype(np.uint16)
    check = check_domain(movie, Camera(), {})
    assert check.camera_suspect and check.warnings
    assert not any("nan" in w for w in check.warnings)
