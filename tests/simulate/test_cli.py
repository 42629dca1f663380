"""``python -m decode_mem.simulate`` and ``simulate_stack``: files, formats, atomicity, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch
import yaml
import zarr

from decode_mem.io.localizations import read_localizations
from decode_mem.simulate import SimulationConfig, simulate_movie, simulate_stack
from decode_mem.simulate import stack as stack_module
from decode_mem.simulate.__main__ import main
from decode_mem.simulate.movie import MovieBlock, MovieSimulator


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".partial"))


def test_cli_writes_tiff_and_ground_truth(tmp_path: Path) -> None:
    out, gt = tmp_path / "stack.tif", tmp_path / "gt.csv"
    rc = main(["--frames", "30", "--size", "16", "24", "--density", "2", "--out", str(out), "--gt", str(gt),
               "--seed", "4", "--block", "7", "--quiet"])
    assert rc == 0
    assert _leftovers(tmp_path) == []
    frames = tifffile.imread(out)
    assert frames.shape == (30, 16, 24) and frames.dtype == np.uint16
    assert tifffile.memmap(out, mode="r").shape == (30, 16, 24)  # one contiguous series
    table = read_localizations(gt, pixel_size=100.0)
    # the same as the in-memory movie of that config and seed
    cfg = SimulationConfig(frame_size=(16, 24), density=2.0)
    adu, want, _ = simulate_movie(cfg, 30, seed=4)
    assert np.array_equal(frames, adu)
    assert len(table) == len(want)
    np.testing.assert_array_equal(table["frame"], want["frame"])
    np.testing.assert_allclose(table["x"], want["x"], atol=1e-3)
    np.testing.assert_allclose(table["y"], want["y"], atol=1e-3)
    np.testing.assert_allclose(table["photons"], want["photons"], rtol=1e-5)
    with open(gt) as fh:
        header = fh.readline()
        first = fh.readline().split(",")
    # a 2-D PSF: no z column (locan and others would read an all-zero z as 3-D data)
    assert header.startswith('"id","frame","x [nm]","y [nm]","intensity [photon]"')
    assert int(first[1]) == 1  # 1-based frames in the file


def test_zarr_output_equals_the_tiff(tmp_path: Path) -> None:
    args = ["--frames", "20", "--size", "12", "12", "--psf", "astig3d", "--seed", "1", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "a.tif")]) == 0
    assert main([*args, "--out", str(tmp_path / "a.zarr"), "--block", "8"]) == 0
    arr = zarr.open_array(tmp_path / "a.zarr", mode="r")
    assert arr.shape == (20, 12, 12) and arr.chunks == (8, 12, 12) and arr.dtype == np.uint16
    assert arr.attrs["seed"] == 1 and arr.attrs["decode_mem_simulation"]["psf"] == "astig3d"
    assert np.array_equal(arr[:], tifffile.imread(tmp_path / "a.tif"))
    assert _leftovers(tmp_path) == []


def test_cli_options_and_yaml_config(tmp_path: Path) -> None:
    cfg_file = tmp_path / "sim.yaml"
    cfg_file.write_text(yaml.safe_dump({"simulation": {"frame_size": [10, 14], "density": 0.5, "bg": [50, 60]}}))
    out = tmp_path / "s.tiff"
    rc = main(["--config", str(cfg_file), "--frames", "5", "--camera", "scmos", "--bg", "20", "--photons", "800",
               "100", "--on-time", "3", "--bg-mode", "smooth", "--sigma", "1.2", "--out", str(out), "--quiet"])
    assert rc == 0
    with tifffile.TiffFile(out) as tif:
        assert tif.series[0].shape == (5, 10, 14)
        meta = tif.shaped_metadata[0]["decode_mem_simulation"]
    assert meta["camera"]["kind"] == "scmos" and meta["bg"] == [20.0, 20.0] and meta["density"] == 0.5
    assert meta["photons_mean"] == 800.0 and meta["on_time"] == 3.0 and meta["psf_sigma"] == [1.2, 1.2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--density", "-1"], "simulation.density must be >= 0"),
        (["--size", "0", "8"], "simulation.frame_size must be two positive integers"),
        (["--psf", "airy"], "simulation.psf must be one of"),
        (["--camera", "ccd"], "--camera ccd: neither a preset (emccd or scmos) nor a camera YAML"),
        (["--frames", "0"], "frames must be >= 1"),
        (["--block", "0"], "block must be >= 1"),
        (["--seed", "-1"], "seed must be >= 0"),
        (["--threads", "0"], "--threads must be >= 1"),
        (["--device", "gpu0"], "device: "),
    ],
)
def test_bad_parameters_exit_2_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture, args: list,
                                              message: str) -> None:
    out = tmp_path / "s.tif"
    base = ["--frames", "3", "--out", str(out), "--quiet"]
    assert main(base + args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_a_gpu_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--frames", "3", "--out", str(tmp_path / "s.tif"), "--device", "cuda", "--quiet"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


def test_unknown_output_format_and_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--frames", "3", "--out", str(tmp_path / "s.png")]) == 2
    assert "must end in .tif, .tiff or .zarr" in capsys.readouterr().err
    assert main(["--out", str(tmp_path / "s.tif")]) == 2  # argparse: --frames is required
    assert main(["--help"]) == 0


@pytest.mark.parametrize("suffix", [".tif", ".zarr"])
def test_a_failure_midway_leaves_no_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    calls = {"n": 0}
    original = MovieSimulator.block

    def failing(self: MovieSimulator, t0: int, t1: int) -> MovieBlock:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return original(self, t0, t1)

    monkeypatch.setattr(MovieSimulator, "block", failing)
    with pytest.raises(KeyboardInterrupt):
        simulate_stack(SimulationConfig(frame_size=(8, 8)), 50, tmp_path / f"s{suffix}", tmp_path / "gt.csv",
                       block=5)
    assert list(tmp_path.iterdir()) == []


def test_bigtiff_above_the_threshold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack_module, "BIGTIFF_BYTES", 100)
    seen: list[int] = []
    result = simulate_stack(SimulationConfig(frame_size=(8, 8)), 4, tmp_path / "b.tif", block=3,
                            progress=seen.append)
    assert seen == [3, 1]
    assert result.shape == (4, 8, 8) and result.gt is None
    with tifffile.TiffFile(tmp_path / "b.tif") as tif:
        assert tif.is_bigtiff and tif.series[0].shape == (4, 8, 8)


def test_camera_out_writes_a_camera_yaml_with_scmos_maps_that_infer_reads(tmp_path: Path) -> None:
    from decode_mem.config import load_yaml
    from decode_mem.io.camera import Camera

    cfg = SimulationConfig(frame_size=(12, 10), camera="scmos", sensor_variation=0.2, density=1.0)
    result = simulate_stack(cfg, 3, tmp_path / "s.tif", camera_out=tmp_path / "cam" / "camera.yaml")
    assert result.camera == tmp_path / "cam" / "camera.yaml"
    camera = Camera.from_dict(load_yaml(result.camera, section="camera"), base_dir=result.camera.parent)
    assert camera.kind == "scmos" and camera.has_maps
    maps = camera.load_maps((12, 10))
    sim = MovieSimulator(cfg, seed=0)
    np.testing.assert_allclose(maps.baseline, sim.sensor.baseline.numpy(), rtol=1e-6)
    np.testing.assert_allclose(maps.read_noise, sim.sensor.read_noise.numpy(), rtol=1e-4)  # via ADU² and back
    assert sorted(p.name for p in (tmp_path / "cam").iterdir()) == [
        "camera.yaml", "camera_e_per_adu.npy", "camera_offset.npy", "camera_variance.npy"]


def test_cli_structure_and_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, gt = tmp_path / "rings.tif", tmp_path / "rings.csv"
    rc = main(["--frames", "12", "--size", "24", "24", "--structure", "rings", "--off-time", "20", "--drift_nm", "100",
               "--drift-frames", "50", "--out", str(out), "--gt", str(gt), "--seed", "1"])
    assert rc == 0 and "true drift" in capsys.readouterr().out
    cfg = SimulationConfig(frame_size=(24, 24), structure={"kind": "rings", "off_time": 20.0}, drift_nm=100.0,
                           drift_frames=50.0)
    adu, _, _ = simulate_movie(cfg, 12, seed=1)
    assert np.array_equal(tifffile.imread(out), adu)
    drift = np.loadtxt(tmp_path / "rings_drift.csv", delimiter=",", skiprows=1)
    assert drift.shape == (12, 3) and np.array_equal(drift[:, 0], np.arange(1, 13))
    np.testing.assert_allclose(drift[:, 1:], MovieSimulator(cfg, seed=1).drift_nm(0, 12), atol=1e-4)
    assert main(["--frames", "2", "--structure", "pores", "--out", str(tmp_path / "x.tif")]) == 2
