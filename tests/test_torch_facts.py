"""``torch_facts``: what a run knows of torch without importing it equals what torch says (checked in a fresh process
where torch must stay unloaded)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from decode_mem import torch_facts


def test_the_facts_read_without_torch_are_torchs(tmp_path, monkeypatch) -> None:
    """Its version from its own files, whether its build can use a GPU, the CPU as a device, and its thread count as a
    process with torch loaded remembered it; in a fresh process none of them imports torch."""
    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "throughput.json"))
    assert torch_facts.torch_version() == torch.__version__
    assert torch_facts.cpu_only_torch() == (torch.version.cuda is None and torch.version.hip is None)
    if torch_facts.cpu_only_torch():
        assert torch_facts.device_type("auto") == "cpu" and not torch.cuda.is_available()
    assert torch_facts.torch_threads() == torch.get_num_threads()  # remembered for this machine and environment
    probe = ("import json, sys; from decode_mem import torch_facts as f; "
             "print(json.dumps([f.torch_version(), f.torch_threads(), f.device_type('cpu'), str(f.run_device('cpu')), "
             "'torch' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          env={**os.environ, "DECODE_MEM_CACHE": str(tmp_path / "throughput.json")})
    version, threads, kind, name, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert (version, threads, kind, name, loaded) == (torch.__version__, torch.get_num_threads(), "cpu", "cpu", False)
