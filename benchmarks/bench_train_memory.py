"""Training memory across batch size x accumulation x AMP x chunk size — the measured "memory table".

    python benchmarks/bench_train_memory.py                  # CPU: peak RssAnon (its run time is in the report)
    python benchmarks/bench_train_memory.py --device cuda    # GPU: torch.cuda max allocated as well

Each configuration runs in a fresh subprocess: two optimizer steps of ``train_step`` (imported from
decode_mem.train.step, not copied) on simulated 3-frame windows; the second step is measured with
``decode_mem.memory.measure_phase`` (RssAnon sampled every 10 ms; CUDA peak since a reset). Writes
benchmarks/results/train_memory.md and train_memory.png (``--out NAME``: NAME.md and NAME.png). The training
defaults (4 × 4 against 16 × 1 at 64² px) are compared by::

    python benchmarks/bench_train_memory.py --frame 64 --batches 4 16 --accums 1 4 --chunks 0 --out train_defaults
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from command_line import command_line
from machine import machine_line

RESULTS = Path(__file__).parent / "results"


def child(a: dict) -> dict:
    import torch

    torch.set_num_threads(a["threads"])
    from decode_mem.memory import measure_phase, read_host_memory
    from decode_mem.model.loss import DecodeLoss
    from decode_mem.model.net import DecodeNet, ModelConfig
    from decode_mem.model.precision import AMP_DTYPES
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.train.chunking import chunk_batch, count_crops
    from decode_mem.train.data import SimulatedBatches
    from decode_mem.train.step import make_scaler, train_step

    device = torch.device(a["device"])
    torch.manual_seed(0)
    net = DecodeNet(ModelConfig(features=a["features"], inter_features=a["features"], use_z=False)).to(device)
    loss_fn = DecodeLoss(model_config=net.config)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    amp = AMP_DTYPES.get(a["amp"])
    scaler = make_scaler(device, amp)
    size = (a["frame"], a["frame"])
    stream = SimulatedBatches(SimulationConfig(frame_size=size, density=1.0), a["batch"], a["accum"], seed=0)
    chunk = a["chunk"]
    n_micro = a["accum"] * count_crops(size, chunk)

    def step(i: int) -> float:
        batches = [stream.batch(i, m) for m in range(a["accum"])]  # simulated up front: not part of the step
        micro = (c for b in batches for c in chunk_batch(b, chunk))
        t0 = time.perf_counter()
        train_step(net, loss_fn, micro, n_micro, opt, scaler, device=device, amp_dtype=amp, grad_clip=1.0)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    step(0)  # warm-up: optimizer state, allocator pools
    base = read_host_memory()["rss_anon_mb"]
    with measure_phase("step", interval=0.01, device=a["device"]) as peak:
        seconds = step(1)
    return {**a, "rss_anon_base_mb": base, "rss_anon_peak_mb": peak.rss_anon_mb,
            "cuda_max_allocated_mb": peak.cuda_max_allocated_mb, "step_s": seconds}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--features", type=int, default=48, help="network width (48 = DECODE default)")
    p.add_argument("--frame", type=int, default=128, help="training frame side in px")
    p.add_argument("--batches", type=int, nargs="+", default=[2, 8])
    p.add_argument("--accums", type=int, nargs="+", default=[1, 4])
    p.add_argument("--chunks", type=int, nargs="+", default=[0, 64], help="0 = no chunking")
    p.add_argument("--amps", nargs="+", default=None,
                   help="default: fp32, and bf16 where it is native (CUDA, or a CPU with AVX-512 BF16 / AMX)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="train_memory", help="report name in benchmarks/results (default train_memory)")
    p.add_argument("--child")
    args = p.parse_args()
    args.command = command_line()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0

    if args.amps is None:
        args.amps = ["fp32", "bf16"] if native_bf16(args.device) else ["fp32"]
    rows = []
    t_start = time.perf_counter()
    for batch, accum, amp, chunk in itertools.product(args.batches, args.accums, args.amps, args.chunks):
        a = {"device": args.device, "features": args.features, "frame": args.frame, "batch": batch,
             "accum": accum, "amp": amp, "chunk": chunk or None, "threads": args.threads}
        out = subprocess.run([sys.executable, __file__, "--child", json.dumps(a)], capture_output=True, text=True,
                             check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    write_report(rows, args, time.perf_counter() - t_start)
    return 0


def native_bf16(device: str) -> bool:
    import torch

    from decode_mem.model.precision import emulated_bf16

    return not emulated_bf16("bf16", torch.device(device))


def write_report(rows: list[dict], args: argparse.Namespace, seconds: float) -> None:
    import torch

    RESULTS.mkdir(exist_ok=True)
    cuda = args.device.startswith("cuda")
    head = ("| batch | accumulation | effective batch | AMP | chunk | peak RssAnon in step (MB) "
            "| step RssAnon growth (MB) |")
    head += " CUDA max allocated (MB) | step (s) |" if cuda else " step (s) |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [r["batch"], r["accum"], r["batch"] * r["accum"], r["amp"], r["chunk"] or "none",
                 f"{r['rss_anon_peak_mb']:.0f}", f"{r['rss_anon_peak_mb'] - r['rss_anon_base_mb']:.0f}"]
        if cuda:
            cells.append(f"{r['cuda_max_allocated_mb']:.0f}" if r["cuda_max_allocated_mb"] else "")
        cells.append(f"{r['step_s']:.2f}")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    md = [
        "# Training memory: batch × accumulation × AMP × chunk size",
        "",
        f"Command: `{args.command}` ({seconds / 60:.1f} min in all)",
        "",
        f"Machine: {machine_line(args.threads, gpu=torch.cuda.get_device_name(0) if cuda else None)}; device "
        f"{args.device}{'' if cuda else ' (no GPU on this machine)'}.",
        "",
        f"Network: DECODE-style, depth 2, {args.features} features (2-D, no z). Training frames "
        f"{args.frame}×{args.frame} px simulated on the fly; one optimizer step = `accumulation` micro-batches of "
        "`batch` windows (each cut into `chunk`-sized crops when chunking), measured after one warm-up step in a "
        "fresh process. 'peak RssAnon in step' is the process's anonymous memory at its highest during the step "
        f"(includes the interpreter, torch, the model and the optimizer state: RssAnon before the step was "
        f"{min(r['rss_anon_base_mb'] for r in rows):.0f}-{max(r['rss_anon_base_mb'] for r in rows):.0f} MB in this "
        "run); 'growth' is that peak minus RssAnon just before the step.",
        "",
        *lines,
        "",
        "Step times depend on the machine's load. 'growth' depends on what the allocator kept from the warm-up "
        "step; the peak column is the one to compare.",
        "",
        *reading(rows),
        "",
        "Not measured here: "
        + ("" if cuda else "CUDA (no GPU in this run — rerun with `--device cuda`), fp16 with GradScaler "
           "(CUDA only), ")
        + ("" if "bf16" in args.amps else "bf16 (this CPU has no native bf16 — no AVX-512 BF16 or AMX — and "
           "training under bf16 autocast is then far slower than fp32, see `decode_mem.train`'s warning; "
           "`--amps fp32 bf16` measures it anyway), ")
        + "gradient checkpointing, DataLoader workers.",
        "",
    ]
    (RESULTS / f"{args.out}.md").write_text("\n".join(md))
    plot(rows, RESULTS / f"{args.out}.png")


def reading(rows: list[dict]) -> list[str]:
    """What the table shows about accumulation, chunking and bf16, each ratio computed from this run's peaks."""
    peak = {(r["batch"], r["accum"], r["amp"], r["chunk"]): r["rss_anon_peak_mb"] for r in rows}
    batches = sorted({k[0] for k in peak})
    accums = sorted({k[1] for k in peak})
    out = ["How to read it (ratios of the peak column, computed from this run):", ""]

    def ratios(pairs: list[tuple]) -> str:
        vals = [peak[b] / peak[a] for a, b in pairs if a in peak and b in peak]
        return f"{min(vals):.2f}-{max(vals):.2f} (n={len(vals)})" if vals else "not measured"

    if len(accums) > 1:
        lo, hi = accums[0], accums[-1]
        pairs = [((b, lo, amp, c), (b, hi, amp, c)) for (b, a, amp, c) in peak if a == lo]
        out.append(f"- accumulation {lo} → {hi} (effective batch ×{hi // lo}): peak ×{ratios(pairs)}; "
                   f"growing the batch by the same factor instead (batch {batches[0]} → {batches[-1]}, "
                   f"accumulation {lo}): peak ×"
                   + ratios([((batches[0], lo, amp, c), (batches[-1], lo, amp, c))
                             for (b, a, amp, c) in peak if b == batches[0] and a == lo]) + ".")
    chunked = sorted({k[3] for k in peak if k[3]})
    for c in chunked:
        pairs = [((b, a, amp, None), (b, a, amp, c)) for (b, a, amp, cc) in peak if cc is None]
        out.append(f"- chunks of {c} px instead of whole frames: peak ×{ratios(pairs)}.")
    seconds = {(r["batch"], r["accum"], r["amp"], r["chunk"]): r["step_s"] for r in rows}
    for small in sorted(peak):
        for large in sorted(peak):
            same = small[0] * small[1] == large[0] * large[1] and small[2:] == large[2:]
            if same and small[0] < large[0]:
                out.append(f"- the same effective batch {small[0] * small[1]} as batch {small[0]} × accumulation "
                           f"{small[1]} instead of {large[0]} × {large[1]}: peak ×{peak[small] / peak[large]:.2f}, "
                           f"step time ×{seconds[small] / seconds[large]:.2f}.")
    if {"fp32", "bf16"} <= {k[2] for k in peak}:
        pairs = [((b, a, "fp32", c), (b, a, "bf16", c)) for (b, a, amp, c) in peak if amp == "fp32"]
        out.append(f"- bf16 autocast instead of fp32: peak ×{ratios(pairs)}.")
    return out


def plot(rows: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4))
    ax = fig.subplots()
    labels = [f"b{r['batch']}×{r['accum']}\n{r['amp']}\n{'c' + str(r['chunk']) if r['chunk'] else 'whole'}"
              for r in rows]
    ax.bar(range(len(rows)), [r["rss_anon_peak_mb"] - r["rss_anon_base_mb"] for r in rows], color="C0")
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("RssAnon growth during one step (MB)")
    ax.set_title("Training step memory: batch×accumulation, AMP, chunk")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
