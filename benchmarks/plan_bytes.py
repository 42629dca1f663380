"""The planner's predictions in exact bytes, with a fixed baseline (no measured RssAnon), as JSON on stdout.

The memory table's inference grid, 'auto' choices without timing (probe=False) under fixed budgets, and training
plans. It uses only public names of decode_mem.plan (plan_inference, choose_sizes, plan_training), so the same
script runs in two trees and their outputs compare byte for byte (issue 37's before/after check):
``PYTHONPATH=TREE python benchmarks/plan_bytes.py data/models/default_2d.pt > plan_bytes_<side>.json``.
"""
import dataclasses
import json
import sys

import torch

torch.set_num_threads(1)
from decode_mem.model.checkpoint import load_model  # noqa: E402
from decode_mem.model.net import DecodeNet, ModelConfig  # noqa: E402
from decode_mem.plan import choose_sizes, plan_inference, plan_training  # noqa: E402
from decode_mem.simulate.config import SimulationConfig  # noqa: E402

MiB = 2**20
net = load_model(sys.argv[1], device="cpu").net
out = {}
keys = ("frame_shape", "chunk_size", "batch_size", "block", "tile_shape", "n_tiles", "unit_shape", "network_bytes",
        "block_bytes", "staging_bytes", "baseline_bytes", "host_bytes", "device_bytes", "need_bytes", "streams")


def fields(p):
    d = {k: getattr(p, k) for k in keys if hasattr(p, k)}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


for size in (512, 1024, 2048):
    for chunk in (256, 512):
        for batch in (1, 4):
            for amp in ("off", "bf16"):
                p = plan_inference(net, (size, size), chunk_size=chunk, batch_size=batch, amp=amp, device="cpu",
                                   n_frames=3)
                out[f"infer {size} chunk {chunk} batch {batch} {amp} 3 frames"] = fields(p)
for size, limit in ((256, 1024), (2048, 768), (2048, 2048), (4096, 1024)):
    for streams in (1, 2):
        key = f"auto {size} limit {limit}MiB streams {streams} baseline 300MiB"
        try:
            c = choose_sizes(net, (size, size), memory_limit=limit * MiB, baseline_bytes=300 * MiB, probe=False,
                             device="cpu", streams=streams)
        except Exception as e:  # a refusal is a result too (its message is compared)
            out[key] = {"error": f"{type(e).__name__}: {e}"}
            continue
        out[key] = {**fields(c.plan), "budget_bytes": c.budget_bytes, "reason": c.reason}
train_net = DecodeNet(ModelConfig())
for frame, batch, crop, acc in ((64, 2, None, 1), (64, 8, None, 1), (128, 8, 64, 1), (256, 4, 128, 2)):
    t = plan_training(train_net, SimulationConfig(frame_size=(frame, frame), density=1.0), batch_size=batch,
                      chunk_size=crop, accumulation_steps=acc, val_size=16, amp="off", device="cpu")
    d = {f.name: getattr(t, f.name) for f in dataclasses.fields(t)}
    d.update(need_bytes=t.need_bytes if hasattr(t, "need_bytes") else None,
             network=t.network_bytes, optimizer=t.optimizer_bytes)
    out[f"train {frame} batch {batch} crop {crop} acc {acc}"] = {k: list(v) if isinstance(v, tuple) else v
                                                              for k, v in d.items()}
json.dump(out, sys.stdout, indent=1, sort_keys=True, default=str)
