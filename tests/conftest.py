"""Shared test setup: print the environment, skip `gpu` tests without CUDA."""

from __future__ import annotations

import platform

import pytest


def pytest_report_header(config: pytest.Config) -> list[str]:
    from importlib.metadata import PackageNotFoundError, version

    import torch

    def ver(name: str) -> str:  # a machine may lack one (the first GPU machine had no zarr): say so, go on
        try:
            return version(name)
        except PackageNotFoundError:
            return "absent"

    cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return [
        f"decode_mem env: python {platform.python_version()}, torch {torch.__version__}, numpy {ver('numpy')},"
        f" tifffile {ver('tifffile')}, zarr {ver('zarr')}, cuda device: {cuda}"
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    """Tests use tiny tensors: one intra-op thread is faster there, and far faster on a busy machine
    (OpenMP workers spinning against other processes made a 2-thread training step ~50x slower)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True, scope="session")
def _throughput_cache(tmp_path_factory):
    """'auto' sizes remember measured speeds in a cache file: tests keep theirs out of the user's home."""
    import os

    previous = os.environ.get("DECODE_MEM_CACHE")
    os.environ["DECODE_MEM_CACHE"] = str(tmp_path_factory.mktemp("cache") / "throughput.json")
    yield
    if previous is None:
        os.environ.pop("DECODE_MEM_CACHE", None)
    else:
        os.environ["DECODE_MEM_CACHE"] = previous
