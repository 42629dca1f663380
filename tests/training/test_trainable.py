"""``train.trainable``: fine-tuning part of a network, down to single output rows, leaves the rest bit for bit."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from decode_mem.errors import CheckpointError, ConfigError
from decode_mem.model.checkpoint import load_model
from decode_mem.model.net import CHANNEL_INDEX, OUTPUT_CHANNELS
from decode_mem.train.__main__ import main
from decode_mem.train.config import TrainConfig
from decode_mem.train.loop import fit

PHOTON_SIGMA_ROW = ["heads.sigma.2.weight[0]", "heads.sigma.2.bias[0]"]


def _changed(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """name -> bool mask of the rows (first axis) whose values differ in any bit."""
    return {k: (a[k] != b[k]).reshape(a[k].shape[0], -1).any(dim=1) for k in a if not torch.equal(a[k], b[k])}


def test_a_trained_row_changes_alone_and_every_other_output_stays_bit_identical(tiny_cfg: TrainConfig) -> None:
    base = fit(replace(tiny_cfg, steps=2))
    tuned = fit(replace(tiny_cfg, out=str(Path(tiny_cfg.out).with_name("tuned")), steps=3, lr=0.05,
                        init_from=str(base), trainable=tuple(PHOTON_SIGMA_ROW)))
    old, new = load_model(base).net, load_model(tuned).net
    changed = _changed(old.state_dict(), new.state_dict())
    assert sorted(changed) == ["heads.sigma.2.bias", "heads.sigma.2.weight"]
    for rows in changed.values():
        assert rows.tolist() == [True, False, False, False]  # the photon sigma's row only
    frames = 50.0 + 400.0 * torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = old(frames), new(frames)
    for name in OUTPUT_CHANNELS:
        same = torch.equal(a[:, CHANNEL_INDEX[name]], b[:, CHANNEL_INDEX[name]])
        assert same is (name != "sigma_photons"), name


def test_whole_parameters_by_glob_train_and_the_rest_is_frozen(tiny_cfg: TrainConfig) -> None:
    base = fit(replace(tiny_cfg, steps=2))
    tuned = fit(replace(tiny_cfg, out=str(Path(tiny_cfg.out).with_name("tuned")), steps=2, init_from=str(base),
                        trainable=("heads.bg.*",)))
    changed = _changed(load_model(base).net.state_dict(), load_model(tuned).net.state_dict())
    assert changed and all(k.startswith("heads.bg.") for k in changed)


def test_a_photon_sigma_floor_that_differs_may_be_fine_tuned_from(tiny_cfg: TrainConfig) -> None:
    """The floor is a constant, not the architecture: the shipped model's 300 photons became 10 this way."""
    base = fit(replace(tiny_cfg, steps=1, model=replace(tiny_cfg.model, sigma_photons_eps=300.0)))
    tuned = fit(replace(tiny_cfg, out=str(Path(tiny_cfg.out).with_name("tuned")), steps=1, init_from=str(base)))
    assert load_model(tuned).config.sigma_photons_eps == tiny_cfg.model.sigma_photons_eps == 10.0


@pytest.mark.parametrize(("patterns", "match"), [
    (("heads.sigma.2.weight[",), "not a parameter-name pattern"),
    (("heads.sigma.2.weight[2:1]",), "selects no rows"),
    ("heads.*", "non-empty list"),
    ((), "non-empty list"),
])
def test_malformed_patterns_are_refused_with_the_config(patterns, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        TrainConfig(trainable=patterns)


@pytest.mark.parametrize(("patterns", "match"), [
    (("heads.nothing.*",), "matches no parameter"),
    (("heads.sigma.2.bias[3:9]",), "rows 3:9 of 'heads.sigma.2.bias', which has 4 rows"),
])
def test_patterns_the_model_lacks_are_refused_before_training(tiny_cfg: TrainConfig, patterns, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        fit(replace(tiny_cfg, trainable=patterns))
    assert not (Path(tiny_cfg.out) / "checkpoint.pt").exists()


def test_resume_refuses_other_trainable_patterns(tiny_cfg: TrainConfig) -> None:
    fit(replace(tiny_cfg, steps=2, trainable=("heads.*",)))
    with pytest.raises(CheckpointError, match="'trainable' differs"):
        fit(replace(tiny_cfg, resume=True, trainable=("heads.p.*",)))


def test_cli_flag(tiny_cfg: TrainConfig, tmp_path: Path, capsys) -> None:
    assert main(["--trainable", "heads.sigma.2.weight[", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a parameter-name pattern" in err[0]
    assert not (tmp_path / "x").exists()


def test_the_recalibration_recipe_trains_the_photon_sigma_row_on_the_shipped_physics() -> None:
    """pipelines/recalibrate_photon_sigma_2d.yaml (how the shipped model lost its 300-photon floor): the photon
    sigma's row only, the 10-photon floor, and the shipped model's own training simulation and architecture."""
    from decode_mem.model.checkpoint import SHIPPED_MODEL
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.train.config import load_train_config

    cfg = load_train_config(SHIPPED_MODEL.parents[2] / "pipelines" / "recalibrate_photon_sigma_2d.yaml")
    assert cfg.trainable == tuple(PHOTON_SIGMA_ROW) and cfg.model.sigma_photons_eps == 10.0
    shipped = load_model(SHIPPED_MODEL)
    assert cfg.model == shipped.config
    assert cfg.simulation == SimulationConfig.from_dict(shipped.simulation)
