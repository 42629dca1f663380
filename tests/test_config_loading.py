"""Strict config keys and YAML loading: every problem is a ConfigError that names the file or key."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from decode_mem.config import check_keys, load_yaml
from decode_mem.errors import ConfigError


@dataclass
class _Cfg:
    chunk_size: int = 1
    steps: int = 2


def test_unknown_key_names_the_key_and_suggests_the_closest() -> None:
    with pytest.raises(ConfigError, match=r"train\.yaml: unknown key 'chunksize' \(did you mean 'chunk_size'\?\)"):
        check_keys(_Cfg, {"chunksize": 3}, "train.yaml")
    with pytest.raises(ConfigError, match="known keys are"):
        check_keys(_Cfg, {"zzz": 3}, "x")
    check_keys(_Cfg, {"steps": 3}, "x")


def test_load_yaml_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_yaml(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_yaml(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_yaml(listy)


def test_load_yaml_section(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("train: {steps: 3}\n")
    assert load_yaml(path, section="train") == {"steps": 3}
    assert load_yaml(path, section="other") == {"train": {"steps": 3}}


def test_version_key_is_checked_and_removed(tmp_path: Path) -> None:
    ok = tmp_path / "ok.yaml"
    ok.write_text("version: 1\nsteps: 3\n")
    assert load_yaml(ok) == {"steps": 3}
    newer = tmp_path / "newer.yaml"
    newer.write_text("version: 99\nsteps: 3\n")
    with pytest.raises(ConfigError, match=r"newer\.yaml: config version 99"):
        load_yaml(newer)


def test_a_renamed_train_key_is_read_under_its_old_name(tmp_path: Path) -> None:
    """``chunk_size`` (train's crop side before it became ``crop_size``) still reads; both spellings together, or
    a misspelling of the old one, are one clear error that names the new key."""
    from decode_mem.train.config import load_train_config

    path = tmp_path / "train.yaml"
    path.write_text("train:\n  use_chunking: true\n  chunk_size: 64\n")
    assert load_train_config(path).crop_size == 64
    path.write_text("train:\n  chunk_size: 64\n  crop_size: 32\n")
    with pytest.raises(ConfigError, match=r"train\.yaml: 'chunk_size' and 'crop_size' are one setting"):
        load_train_config(path)
    path.write_text("train:\n  chunk_sise: 64\n")
    with pytest.raises(ConfigError, match=r"unknown key 'chunk_sise' \(did you mean 'crop_size'\?\)"):
        load_train_config(path)


@pytest.mark.parametrize(("make", "message"), [
    ("decode_mem.simulate.config:SimulationConfig(psf='airy')", r"simulation\.psf must be one of \('gauss2d'"),
    ("decode_mem.simulate.structures:StructureConfig(kind='stars')", r"simulation\.structure\.kind must be one of"),
    ("decode_mem.model.config:ModelConfig(upsample='cubic')", r"model\.upsample must be one of"),
    ("decode_mem.drift.config:DriftConfig(method='aim')", r"drift\.method must be one of \('loo', 'rcc'\)"),
    ("decode_mem.model.config:ModelConfig(depth=True)", r"model\.depth must be an integer, got True"),
    ("decode_mem.model.config:ModelConfig(z_scale=float('inf'))", r"model\.z_scale must be a positive finite number"),
    ("decode_mem.model.config:ModelConfig(z_scale=0)", r"model\.z_scale must be > 0, got 0"),
    ("decode_mem.simulate.structures:StructureConfig(kind='rings', ring_diameter='big')",
     r"simulation\.structure\.ring_diameter must be a finite number, got 'big'"),
])
def test_every_config_checks_choices_and_numbers_the_same_way(make: str, message: str) -> None:
    """One shared check (``check_choice``/``check_number``) behind the simulation, structure, model and drift
    configs: a bad value is one ConfigError naming the key as a user writes it."""
    import importlib

    module, call = make.split(":")
    with pytest.raises(ConfigError, match=message):
        eval(call, vars(importlib.import_module(module)))
