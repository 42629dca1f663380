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
