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

    # the count only: torch.cuda.get_device_name would initialise CUDA in this process, and tests check that a
    # run without a GPU never does (tests/test_memory.py); the name comes from NVML, which leaves CUDA alone
    cuda = f"{torch.cuda.device_count()} ({_gpu_name()})" if torch.cuda.is_available() else "none"
    return [
        f"decode_mem env: python {platform.python_version()}, torch {torch.__version__}, numpy {ver('numpy')},"
        f" tifffile {ver('tifffile')}, zarr {ver('zarr')}, cuda device: {cuda}"
    ]


def _gpu_name() -> str:
    """The first GPU's name from NVML (no CUDA context), or 'name not read' without pynvml."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no pynvml, no driver library: the header says so rather than failing the session
        return "name not read"
    return name.decode() if isinstance(name, bytes) else str(name)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _single_thread():
    """Tests use tiny tensors: one intra-op thread is faster there, and far faster on a busy machine
    (OpenMP workers spinning against other processes made a 2-thread training step ~50x slower). Set before and
    restored after every test, so that a test that changes the count (``torch_threads``) leaks it to no other."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def torch_threads():
    """For tests of thread handling: ``torch_threads(n)`` gives torch ``n`` intra-op threads for this test (the
    1-thread pin would make every count look right); the pin is back for the next test."""
    import torch

    def set_threads(n: int) -> int:
        torch.set_num_threads(n)
        assert torch.get_num_threads() == n, f"torch did not take {n} threads"
        return n

    return set_threads


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
