"""A repeat run on the same file, model and camera reads the domain check this machine remembers
(``infer.domain_cache``); a file written again, another camera or another model is checked again."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from infer_helpers import SAMPLE

import decode_mem.infer.runner as runner
from decode_mem.infer import InferConfig, run_inference
from decode_mem.infer.domain import DomainCheck
from decode_mem.infer.domain_cache import KEEP, domain_key, domain_path, remembered_check


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "cache" / "throughput.json"
    monkeypatch.setenv("DECODE_MEM_CACHE", str(path))
    return path


def _counting(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = runner.check_domain

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "check_domain", counted)
    return calls


def _config(out: Path, model: Path, movie: Path, **kw) -> InferConfig:
    return InferConfig(out=str(out), model=str(model), inputs=(str(movie),), formats=("csv",), threads=1,
                       device="cpu", batch_size=8, chunk_size="whole", write_probability_map=False, **kw)


def test_a_repeat_run_reads_the_remembered_check(shipped_model, tmp_path, fresh_cache, monkeypatch) -> None:
    movie = tmp_path / "movie.tif"
    shutil.copy(SAMPLE, movie)
    calls = _counting(monkeypatch)
    run_inference(_config(tmp_path / "first", shipped_model, movie))
    assert len(calls) == 1 and domain_path().is_file()
    first = json.loads((tmp_path / "first" / "movie.json").read_text())["domain"]
    run_inference(_config(tmp_path / "second", shipped_model, movie))
    assert len(calls) == 1  # not checked again
    second = json.loads((tmp_path / "second" / "movie.json").read_text())["domain"]
    assert second.pop("remembered") is True and "remembered" not in first
    assert second == first
    # another camera: checked again
    run_inference(_config(tmp_path / "camera", shipped_model, movie, camera_overrides={"read_noise": 20.0}))
    assert len(calls) == 2
    # the file written again (new modification time): checked again
    stat = movie.stat()
    os.utime(movie, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    run_inference(_config(tmp_path / "rewritten", shipped_model, movie))
    assert len(calls) == 3


def test_the_key_holds_file_model_camera_and_options(tmp_path, fresh_cache) -> None:
    movie = tmp_path / "m.tif"
    movie.write_bytes(b"x" * 10)
    base = dict(options={}, camera={"baseline": 100}, model_sha="a", shape=(4, 8, 8), dtype="uint16")
    key = domain_key(movie, **base)
    assert key == domain_key(movie, **base)
    for change in ({"options": {"series": 1}}, {"camera": {"baseline": 0}}, {"model_sha": "b"},
                   {"shape": (5, 8, 8)}):
        assert domain_key(movie, **{**base, **change}) != key
    movie.write_bytes(b"x" * 11)
    assert domain_key(movie, **base) != key
    assert domain_key(tmp_path / "missing.tif", **base) is None  # nothing remembered: checked every time


def test_the_table_keeps_the_latest_checks(fresh_cache) -> None:
    for i in range(KEEP + 5):
        remembered_check(f"k{i}", lambda i=i: DomainCheck((), {"i": i}))
    table = json.loads(domain_path().read_text())
    assert len(table) == KEEP and "k0" not in table and f"k{KEEP + 4}" in table
    again = remembered_check(f"k{KEEP + 4}", lambda: pytest.fail("checked again"))
    assert again.numbers == {"i": KEEP + 4, "remembered": True}
