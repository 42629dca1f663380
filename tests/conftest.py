"""Shared test setup: print the environment, skip `gpu` tests without CUDA, keep `serial` tests apart from the
others where the suite runs on several pytest-xdist workers (the README's command: ``-n 2 --dist loadfile``)."""

from __future__ import annotations

import contextlib
import os
import platform
import tempfile
from pathlib import Path

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

    for item in items:  # several torch threads: kept apart as ``serial`` tests are (below)
        if "torch_threads" in getattr(item, "fixturenames", ()) and item.get_closest_marker("serial") is None:
            item.add_marker(pytest.mark.serial)
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


# ---------------------------------------------------------------------------------------------- serial tests
# A test that measures wall time or a whole process's memory, or that gives torch several threads, is marked
# ``serial`` (``torch_threads`` marks its tests so): on xdist workers it runs while no other worker runs a test. Two
# lock files shared by the run's workers: the room (held shared by every other test, exclusive by a serial run)
# and a gate that a serial test takes before it waits for the room, so that no test starts on another worker
# while it waits. A run of consecutive serial tests (``--dist loadfile`` keeps a file's tests together) holds the
# room from the first to the last; its module fixtures' set-up and tear-down happen inside. Without workers
# (a plain ``pytest``) nothing is locked.

def _is_serial(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("serial") is not None


class _Room:
    """This worker's hold on the shared locks: None, "shared" or "alone"."""

    def __init__(self, run: str, base: Path) -> None:
        self.paths = (base / f"decode_mem-tests-{run}.gate", base / f"decode_mem-tests-{run}.room")
        self.gate = open(self.paths[0], "a+")  # noqa: SIM115 (held for the worker's life)
        self.room = open(self.paths[1], "a+")  # noqa: SIM115
        self.held: str | None = None

    def enter(self, alone: bool) -> None:
        import fcntl

        want = "alone" if alone else "shared"
        if self.held == want:
            return
        self.leave()
        fcntl.flock(self.gate, fcntl.LOCK_EX)  # behind a serial test that waits for the room
        if not alone:
            fcntl.flock(self.gate, fcntl.LOCK_UN)
        fcntl.flock(self.room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        self.held = want

    def leave(self) -> None:
        import fcntl

        if self.held is not None:
            fcntl.flock(self.room, fcntl.LOCK_UN)
            if self.held == "alone":
                fcntl.flock(self.gate, fcntl.LOCK_UN)
        self.held = None

    def close(self) -> None:
        self.leave()
        self.gate.close()
        self.room.close()
        for path in self.paths:
            with contextlib.suppress(OSError):
                path.unlink()


_ROOM: list[_Room] = []  # this worker's, made at its first test


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None or os.name != "posix":  # no workers (or no flock): tests run one at a time anyway
        yield
        return
    if not _ROOM:  # in the run's temporary folder (a worker's basetemp is <the run's>/popen-gwN): pytest's to clear
        given = item.config.option.basetemp
        _ROOM.append(_Room(run, Path(given).parent if given else Path(tempfile.gettempdir())))
    room, alone = _ROOM[0], _is_serial(item)
    room.enter(alone)
    try:
        yield
    finally:
        if not (alone and _is_serial(nextitem)):  # a run of serial tests keeps the room to its end
            room.leave()


def pytest_unconfigure(config: pytest.Config) -> None:
    while _ROOM:
        _ROOM.pop().close()
