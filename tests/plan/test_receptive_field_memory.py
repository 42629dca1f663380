"""The receptive-field probe runs once per machine, architecture and network code (``footprint.trace``'s remembered
traces), not once per process: a later process takes the remembered radius, which is the measured one."""

from __future__ import annotations

import pytest

import decode_mem.model.net as net_module
from decode_mem.footprint.trace import remember_receptive_field, trace_cache_path
from decode_mem.model.config import ModelConfig
from decode_mem.model.net import DecodeNet, measure_receptive_field


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "cache" / "throughput.json"))


def test_a_remembered_radius_is_taken_without_the_probe(fresh_cache, monkeypatch) -> None:
    config = ModelConfig.tiny(depth=1)
    first = DecodeNet(config)
    remember_receptive_field(first)
    assert trace_cache_path().is_file()
    measured = measure_receptive_field(config)
    assert first.receptive_field() == measured

    def no_probe(*args, **kwargs):
        raise AssertionError("the receptive field was measured again")

    monkeypatch.setattr(net_module, "measure_receptive_field", no_probe)
    later = DecodeNet(config)  # as a later process builds it
    remember_receptive_field(later)
    assert later.receptive_field() == measured
    with pytest.raises(AssertionError, match="measured again"):  # another architecture is probed
        remember_receptive_field(DecodeNet(ModelConfig.tiny(depth=2)))


def test_an_assumed_radius_must_be_positive() -> None:
    net = DecodeNet(ModelConfig.tiny(depth=1))
    with pytest.raises(ValueError, match="positive radius"):
        net.assume_receptive_field(0)
