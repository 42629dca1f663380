"""``python -m decode_mem.plan``: predict peak host and device memory of inference before anything runs.

Example: ``python -m decode_mem.plan --frame 2048 2048 --chunk 512 --batch 4 --amp bf16 --device cpu``.
Without ``--chunk``/``--batch`` (or with ``auto``) it chooses them as ``infer`` would under ``--memory_limit``
(timing candidates on this machine unless ``--no_probe``); it prints the measured throughput where this
machine has timed that unit of work before.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from decode_mem.cli import add, int_or_auto, new_parser, run
from decode_mem.config import AMP_CHOICES


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("decode_mem.plan", __doc__)
    p.add_argument("--frame", type=int, nargs=2, metavar=("H", "W"), required=True, help="frame size in px")
    p.add_argument("--frames", type=int, help="frames in the stack (default: long)")
    add(p, "--chunk", "--chunk_size", dest="chunk", type=int_or_auto, default="auto",
        help="tile core side in px, or auto")
    add(p, "--batch", "--batch_size", dest="batch", type=int_or_auto, default="auto",
        help="windows per network call, or auto")
    p.add_argument("--amp", choices=AMP_CHOICES, default="off", help="precision (default off)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument("--model", help="checkpoint (default: the shipped model)")
    p.add_argument("--dtype", default="uint16", help="pixel type of the stack (default uint16)")
    add(p, "--memory_limit", help="budget, e.g. 2GiB (host RssAnon on a CPU, device memory on CUDA)")
    add(p, "--no_probe", action="store_true", help="choose 'auto' sizes without timing candidates")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    def body(args: argparse.Namespace) -> None:
        import numpy as np

        import decode_mem.infer.runner  # noqa: F401 - what an infer process holds: its baseline is measured below
        from decode_mem.config import resolve_device
        from decode_mem.infer.config import DEFAULT_MODEL
        from decode_mem.model.checkpoint import load_model
        from decode_mem.plan.choose import choose_sizes_here, parse_bytes
        from decode_mem.plan.speed import frames_per_second, remembered_seconds

        device = resolve_device(args.device)
        model = load_model(args.model or DEFAULT_MODEL, device=device)
        choice = choose_sizes_here(model.net, tuple(args.frame), chunk_size=args.chunk, batch_size=args.batch,
                                   amp=args.amp, device=device, itemsize=np.dtype(args.dtype).itemsize,
                                   memory_limit=parse_bytes(args.memory_limit), n_frames=args.frames,
                                   probe=not args.no_probe)
        plan = choice.plan
        baseline = plan.baseline_bytes
        seconds = remembered_seconds(model.net, plan, device)
        speed = "not measured on this machine yet" if seconds is None else \
            f"{frames_per_second(plan, seconds):.2f} frames/s of network work (measured here before)"
        lines = [
            f"frames {plan.frame_shape[0]}x{plan.frame_shape[1]} px on {device} ({plan.amp}): chunk_size "
            f"{plan.chunk_size}, batch_size {plan.batch_size}, block {plan.block} frames ({choice.reason})",
            f"  tiles: {plan.n_tiles} of {plan.tile_shape[0]}x{plan.tile_shape[1]} px; largest call "
            f"{plan.unit_shape[0]} tile(s) x {plan.unit_shape[1]} frames",
            f"  predicted peak host RssAnon: {plan.host_bytes / 2**20:.0f} MiB (baseline {baseline / 2**20:.0f}, "
            f"frame blocks {plan.block_bytes / 2**20:.0f}, staging {plan.staging_bytes / 2**20:.0f}"
            + (f", network {plan.network_host_bytes / 2**20:.0f} with the allocator's slack)"
               if device.type == "cpu" else ")"),
        ]
        if device.type == "cuda":
            lines.append(f"  predicted peak device memory (allocator): {plan.device_bytes / 2**20:.0f} MiB")
        if choice.budget_bytes:
            lines.append(f"  budget: {choice.budget_bytes / 2**20:.0f} MiB ({choice.budget_kind})")
        lines.append(f"  throughput: {speed}")
        print("\n".join(lines))

    return run(build_parser(), body, argv)


if __name__ == "__main__":
    sys.exit(main())
