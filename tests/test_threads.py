"""Library calls get the CLI's speed on a busy machine: ``import decode_mem`` asks for sleeping idle OpenMP
threads before torch loads; where torch came first, the work runs on the idle cores (``decode_mem.threads``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from decode_mem import threads
from decode_mem.infer import predict_stack
from decode_mem.model.checkpoint import load_model

pytestmark = pytest.mark.serial  # several torch threads, idle cores read: no other worker beside them

PROBE = ("import json, os, sys\n{first}\nimport decode_mem.threads as t\n"
         "print(json.dumps([os.environ.get('OMP_WAIT_POLICY'), t.WAITS_PASSIVELY]))")


def _probe(first: str, **env: str) -> list:
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run([sys.executable, "-c", PROBE.format(first=first)], capture_output=True, text=True,
                          env={**clean, **env}, check=True)
    return json.loads(done.stdout)


def test_import_before_torch_asks_for_sleeping_threads_and_keeps_a_users_choice() -> None:
    assert _probe("") == ["PASSIVE", True]
    assert _probe("import torch") == [None, False]  # too late to choose: the work picks the thread count
    assert _probe("", OMP_WAIT_POLICY="ACTIVE") == ["ACTIVE", False]


def test_the_thread_count_follows_the_idle_cores_only_where_threads_spin(monkeypatch, torch_threads) -> None:
    torch_threads(4)  # torch's count is the ceiling: with the tests' 1-thread pin every answer would be 1
    assert 0 <= threads.idle_cores(0.05) <= len(os.sched_getaffinity(0))
    assert threads.auto_threads(3) == 3  # asked for: given
    assert threads.auto_threads(None, passive=True) is None  # sleeping threads: torch's count stays
    for idle, expected in ((0.2, 1), (1.6, 2), (2.4, 2), (2.6, 3), (64.0, 4)):
        monkeypatch.setattr(threads, "idle_cores", lambda interval=0.1, idle=idle: idle)
        # every core busy: one thread, no barrier to spin at; else the idle cores, never more than torch's
        assert threads.auto_threads(None, passive=False) == expected, idle


def test_predict_stack_runs_on_the_threads_it_is_given_and_restores_them(torch_threads) -> None:
    before = torch_threads(3)
    seen: list[int] = []
    frames = np.full((2, 32, 32), 120, np.uint16)
    tables = list(predict_stack(frames, load_model(), chunk_size=32, batch_size=2, threads=2,
                                on_block=lambda _: seen.append(torch.get_num_threads())))
    assert tables and seen == [2] and torch.get_num_threads() == before


MALLOC_INFO = """
import ctypes, tempfile
from decode_mem.threads import libc
lib = libc()
lib.malloc.restype, lib.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
lib.free.argtypes = [ctypes.c_void_p]
lib.fopen.restype = ctypes.c_void_p
lib.malloc_info.argtypes, lib.fclose.argtypes = [ctypes.c_int, ctypes.c_void_p], [ctypes.c_void_p]


def malloc_info():  # glibc's malloc_info XML, now
    path = tempfile.mktemp()
    fp = lib.fopen(path.encode(), b"w")
    lib.malloc_info(0, fp)
    lib.fclose(fp)
    return open(path).read()
"""  # a child script's helpers, after its first lines (the setting under test comes before any allocation)

ARENAS = """
import os, sys, threading
from decode_mem.threads import limit_malloc_arenas
applied = limit_malloc_arenas() if sys.argv[1] == "limit" else None
""" + MALLOC_INFO + """
go = threading.Barrier(4)

def work():  # four threads allocate at once: each gets an arena of its own unless they are capped
    go.wait()
    blocks = [lib.malloc(4096) for _ in range(20000)]
    for b in blocks:
        lib.free(b)

workers = [threading.Thread(target=work) for _ in range(4)]
for w in workers:
    w.start()
for w in workers:
    w.join()
assert applied is not True or os.environ["MALLOC_ARENA_MAX"] == "1"  # the processes it starts: the same cap
print(applied, malloc_info().count("<heap nr="))
"""


@pytest.mark.skipif(threads.libc() is None or not hasattr(threads.libc(), "malloc_info"), reason="no glibc here")
def test_limit_malloc_arenas_keeps_the_threads_allocations_in_one_arena_unless_the_environment_says() -> None:
    """``cli.run`` caps glibc's arenas (each arena keeps freed memory of its own beyond the plan): four threads
    that allocate at once share the one arena; without the cap they get their own; a ``MALLOC_ARENA_MAX`` in the
    environment is left as it is."""
    clean = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}

    def heaps(mode: str, **env: str) -> tuple[str, int]:
        done = subprocess.run([sys.executable, "-c", ARENAS, mode], capture_output=True, text=True,
                              env={**clean, **env}, check=True)
        applied, n = done.stdout.split()
        return applied, int(n)

    assert heaps("limit") == ("True", 1)
    assert heaps("none")[1] > 1
    applied, n = heaps("limit", MALLOC_ARENA_MAX="4")
    assert applied == "False" and 1 < n <= 4


THRESHOLD = """
import os, sys
from decode_mem.threads import fix_malloc_thresholds
applied = fix_malloc_thresholds() if sys.argv[1] == "fix" else None
""" + MALLOC_INFO + """


def mapped():  # blocks glibc has mapped on their own, now
    line = [x for x in malloc_info().splitlines() if '<total type="mmap"' in x][0]
    return int(line.split('count="')[1].split('"')[0])


before = mapped()
block = lib.malloc(16 * 2**20)  # a large block (none was freed yet): mapped on its own unless the threshold is up
print(applied, mapped() - before, os.environ.get("MALLOC_MMAP_THRESHOLD_"))
"""


@pytest.mark.skipif(threads.libc() is None or not hasattr(threads.libc(), "malloc_info"), reason="no glibc here")
def test_fix_malloc_thresholds_serves_large_blocks_from_the_heap_from_the_start() -> None:
    """``cli.run`` fixes glibc's mmap threshold at its grown maximum (a resumed run, which times no candidates,
    mapped each large block afresh: twice the system time): a 16 MiB block is then the heap's, without it a mapping
    of its own; a threshold in the environment is left as it is."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}

    def run(mode: str, **env: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", THRESHOLD, mode], capture_output=True, text=True,
                              env={**clean, **env}, check=True)
        return done.stdout.split()

    assert run("fix") == ["True", "0", str(32 * 2**20)]  # and the processes it starts get the same
    assert run("none") == ["None", "1", "None"]
    assert run("fix", MALLOC_MMAP_THRESHOLD_="131072") == ["False", "1", "131072"]
    assert run("fix", DECODE_MEM_MMAP_THRESHOLD="dynamic") == ["False", "1", "None"]  # glibc's own, asked for
