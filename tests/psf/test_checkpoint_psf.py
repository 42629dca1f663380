"""A model trained on a PSF file carries that PSF: the checkpoint alone gives it back after the file is gone, and a
checkpoint moved together with its psf.h5 points its settings at the moved file."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from decode_mem.errors import ConfigError
from decode_mem.io.psf_file import read_psf, write_psf
from decode_mem.model.checkpoint import load_model, save_checkpoint
from decode_mem.model.config import ModelConfig
from decode_mem.model.net import DecodeNet
from decode_mem.psf import spline_from_volume
from decode_mem.simulate import SimulationConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from psf_helpers import analytic_volume

Z = np.arange(-500.0, 550.0, 50.0)


def _checkpoint(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    psf = folder / "psf.h5"
    write_psf(psf, spline_from_volume(analytic_volume(Z, 8), dz=50.0, z0=float(np.flatnonzero(Z == 0)[0]),
                                      z_range=(-450.0, 450.0), pixel_size=100.0))
    sim = SimulationConfig.from_dict({"frame_size": [16, 16], "psf": "spline", "psf_file": str(psf),
                                      "z_range": [-400.0, 400.0]})
    net = DecodeNet(ModelConfig(use_z=True, depth=1, features=8, inter_features=8))
    return save_checkpoint(folder / "model.pt", net=net, camera=sim.camera, simulation=sim.to_dict(), step=0), psf


def test_checkpoint_holds_its_psf_when_the_file_is_gone(tmp_path: Path) -> None:
    ckpt, psf = _checkpoint(tmp_path / "run")
    want = read_psf(psf)
    psf.unlink()
    model = load_model(ckpt)
    assert model.psf is not None and np.array_equal(model.psf.coeff, want.coeff)
    assert (model.psf.z0, model.psf.dz, model.psf.z_range) == (want.z0, want.dz, want.z_range)
    assert np.allclose(model.psf.width_x, want.width_x)
    with pytest.raises(ConfigError, match="PSF file not found"):  # the training settings still name the file
        SimulationConfig.from_dict(model.simulation)


def test_checkpoint_moved_with_its_psf_file_finds_it(tmp_path: Path) -> None:
    _checkpoint(tmp_path / "run")
    moved = tmp_path / "elsewhere"
    shutil.copytree(tmp_path / "run", moved)
    shutil.rmtree(tmp_path / "run")
    model = load_model(moved / "model.pt")
    assert Path(model.simulation["psf_file"]) == (moved / "psf.h5").resolve()
    assert SimulationConfig.from_dict(model.simulation).psf_file == str((moved / "psf.h5").resolve())


def test_models_without_a_psf_file_hold_none(tmp_path: Path) -> None:
    net = DecodeNet(ModelConfig(depth=1, features=8, inter_features=8))
    ckpt = save_checkpoint(tmp_path / "m.pt", net=net, camera=SimulationConfig().camera, simulation={}, step=0)
    assert load_model(ckpt).psf is None


def test_checkpoints_during_training_read_the_psf_file_once(tmp_path: Path, monkeypatch) -> None:
    """Training saves a checkpoint every few steps: they store the spline the training renders with, not a fresh
    read of the file's coefficients per save; a rewritten file is read anew."""
    import decode_mem.io.psf_file as psf_file

    reads = []
    real = psf_file.read_psf
    monkeypatch.setattr(psf_file, "read_psf", lambda p: reads.append(p) or real(p))
    ckpt, psf = _checkpoint(tmp_path / "run")
    sim = load_model(ckpt).simulation
    net = DecodeNet(ModelConfig(use_z=True, depth=1, features=8, inter_features=8))
    for step in (1, 2, 3):
        save_checkpoint(tmp_path / "run" / "model.pt", net=net, camera=SimulationConfig().camera, simulation=sim,
                        step=step)
    assert len(reads) <= 1
    write_psf(psf, read_psf(psf))  # rewritten: another modification time (and inode)
    save_checkpoint(tmp_path / "run" / "model.pt", net=net, camera=SimulationConfig().camera, simulation=sim, step=4)
    assert len(reads) == 2 and load_model(tmp_path / "run" / "model.pt").psf is not None
