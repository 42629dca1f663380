"""The suite's report header (``tests/conftest.py``) names the GPU without initializing CUDA: it runs before every
test, and ``tests/test_memory.py`` checks that a run that does no GPU work never initializes CUDA."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parent / "conftest.py"

# In a fresh process: the header as pytest calls it. Where this machine has no GPU, torch.cuda is made to report
# one device (the header's GPU branch runs, as on a CUDA machine), and torch.cuda._lazy_init, which every call that
# initializes CUDA goes through (torch.cuda.init, current_device, get_device_name, get_device_properties, memory
# queries...), is watched: a call is recorded and raises as it would without a driver. Where there is a GPU,
# nothing is stood in: torch.cuda.is_initialized() says.
PROBE = r"""
import importlib.util, json, sys
import torch
spec = importlib.util.spec_from_file_location("suite_conftest", sys.argv[1])
conftest = importlib.util.module_from_spec(spec)
spec.loader.exec_module(conftest)
real = torch.cuda.is_available()
calls = []
if not real:
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    def _lazy_init():
        calls.append("torch.cuda._lazy_init")
        raise RuntimeError("the header initialized CUDA")
    torch.cuda._lazy_init = _lazy_init
header = conftest.pytest_report_header(None)
print(json.dumps({"header": header, "initialized": torch.cuda.is_initialized(), "calls": calls, "real": real}))
"""


def test_the_report_header_names_the_gpu_without_initializing_cuda() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, str(CONFTEST)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["calls"] == [] and not seen["initialized"], seen
    (line,) = seen["header"]
    assert line.startswith("decode_mem env: python "), line
    if seen["real"]:  # a real GPU: its name came from NVML (nvidia-ml-py is a dependency)
        assert "cuda device: none" not in line and "(name not read)" not in line, line
    else:  # the GPU branch ran: the count, then the name (none read: this machine has no NVML driver library)
        assert "cuda device: 1 (" in line, line
