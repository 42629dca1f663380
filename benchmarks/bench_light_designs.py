"""Light network designs for CPUs (issue 77): arithmetic per frame against the speed OpenVINO gives it.

    python benchmarks/bench_light_designs.py      # ~3 min: writes benchmarks/results/light_designs.md + .json + .png

Does a cheaper convolution, or folding pixels into channels, buy width within a quarter of the small model's
arithmetic? Each design is a ``DecodeNet`` (untrained: dense convolutions take the same time whatever their weights)
of ``depth`` 2 whose two U-Nets use either the standard block (two 3x3 convolutions, ``model.unet.ConvBlock``) or a
depthwise-separable one defined here (each 3x3 convolution a per-channel 3x3 and a 1x1 across channels; not in the
library), or a folded one (``model.unshuffle`` 2: each U-Net on 2 x 2 pixel blocks folded into channels, at half the
side with four times the channels; its features stay folded between the two parts), of depth 1 or 2. Receptive
field: ``DecodeNet.receptive_field``, the halo a tile of a large frame reads on each side. FLOPs are
``model.flops.stream_flops`` over one streamed 256² frame (its frame features, then the temporal part),
as ``tests/model/test_light_model.py`` counts them. Speed: the network alone as a long stream computes it (features
of 16 new frames, then 16 windows' temporal part, whole 256² frames), compiled by OpenVINO for this CPU with the
threads given, in bf16 where the CPU has native bf16 (what ``--engine auto`` took for the shipped models on such
CPUs) and in fp32; the best of ``--repeats`` calls after a first one.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SIDE, FRAMES = 256, 16
# (label, features, per-frame features, block, depth, unshuffle): the shipped small and light models, then the rest;
# block: "standard", "separable" or "folded"
DESIGNS = (("small (shipped)", 16, 16, "standard", 2, 1), ("light (shipped)", 8, 6, "standard", 2, 1),
           ("standard 8/8", 8, 8, "standard", 2, 1), ("standard 12/8", 12, 8, "standard", 2, 1),
           ("separable 16/12", 16, 12, "separable", 2, 1), ("separable 16/16", 16, 16, "separable", 2, 1),
           ("separable 24/16", 24, 16, "separable", 2, 1), ("separable 32/16", 32, 16, "separable", 2, 1),
           ("folded 16/4, depth 1 (trained, not shipped)", 16, 4, "folded", 1, 2),
           ("folded 16/2, depth 1", 16, 2, "folded", 1, 2), ("folded 16/6, depth 1", 16, 6, "folded", 1, 2),
           ("folded 20/4, depth 1 (in training)", 20, 4, "folded", 1, 2),
           ("folded 24/4, depth 1", 24, 4, "folded", 1, 2),
           ("folded 16/4, depth 2", 16, 4, "folded", 2, 2))
KINDS = (("standard", "o", "standard 3x3"), ("separable", "s", "depthwise-separable"),
         ("folded", "^", "folded 2 x 2 (model.unshuffle)"))


def separable_block():
    """The depthwise-separable counterpart of ``model.unet.ConvBlock``."""
    from torch import nn

    from decode_mem.model.unet import make_activation

    class SeparableBlock(nn.Sequential):
        def __init__(self, cin: int, cout: int, activation: str) -> None:
            super().__init__(nn.Conv2d(cin, cin, 3, padding=1, groups=cin), nn.Conv2d(cin, cout, 1),
                             make_activation(activation),
                             nn.Conv2d(cout, cout, 3, padding=1, groups=cout), nn.Conv2d(cout, cout, 1),
                             make_activation(activation))

    return SeparableBlock


def build(features: int, inter: int, kind: str, depth: int, unshuffle: int):
    from unittest import mock

    from decode_mem.model import unet
    from decode_mem.model.config import ModelConfig
    from decode_mem.model.net import DecodeNet

    block = separable_block() if kind == "separable" else unet.ConvBlock
    with mock.patch.object(unet, "ConvBlock", block):
        return DecodeNet(ModelConfig(depth=depth, features=features, inter_features=inter,
                                     unshuffle=unshuffle)).eval()


def frames_per_s(net, precision: str, threads: int, repeats: int) -> tuple[float, str]:
    """Network-only frames/s of a long stream (see the module docstring) and the precision OpenVINO compiled."""
    import torch

    from decode_mem.model.engine import load_engine

    engine = load_engine("openvino", net, threads=threads, precision=precision)
    x = torch.randn(FRAMES + 2, net.config.input_channels, SIDE, SIDE, generator=torch.Generator().manual_seed(0))
    feats = engine.frame_features(x)
    windows = feats[:FRAMES], feats[1:FRAMES + 1], feats[2:]
    engine.temporal(*windows)  # the first calls compile for these shapes
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        engine.frame_features(x[2:])
        engine.temporal(*windows)
        best = min(best, time.perf_counter() - t)
    return FRAMES / best, engine.precision


def measure(args: argparse.Namespace) -> dict:
    import torch

    from decode_mem.model.flops import stream_flops

    torch.set_num_threads(args.threads)
    base = None
    rows = []
    for label, features, inter, kind, depth, unshuffle in DESIGNS:
        net = build(features, inter, kind, depth, unshuffle)
        flops = stream_flops(net, SIDE)
        base = base or flops
        row = {"design": label, "features": features, "inter_features": inter, "kind": kind, "depth": depth,
               "unshuffle": unshuffle, "separable": kind == "separable", "gflop_per_frame": flops / 1e9,
               "flop_ratio": flops / base, "parameters": sum(p.numel() for p in net.parameters()),
               "receptive_field_px": int(net.receptive_field())}
        for precision in ("bf16", "fp32"):
            fps, compiled = frames_per_s(net, precision, args.threads, args.repeats)
            row[precision] = {"frames_per_s": fps, "compiled": compiled}
        rows.append(row)
        print(f"{label}: {row['flop_ratio']:.3f} of the small model's FLOPs, bf16 {row['bf16']['frames_per_s']:.1f} "
              f"frames/s ({row['bf16']['compiled']}), fp32 {row['fp32']['frames_per_s']:.1f}", flush=True)
    for row in rows:
        for precision in ("bf16", "fp32"):
            row[precision]["speed_ratio"] = row[precision]["frames_per_s"] / rows[0][precision]["frames_per_s"]
    return {"threads": args.threads, "repeats": args.repeats, "rows": rows}


def figure(rec: dict, out: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    precision = "bf16" if any(r["bf16"]["compiled"] == "bf16" for r in rec["rows"]) else "fp32"
    for kind, marker, name in KINDS:
        rows = [r for r in rec["rows"] if _kind(r) == kind]
        ax.scatter([r["flop_ratio"] for r in rows], [r[precision]["frames_per_s"] for r in rows], marker=marker,
                   s=50, label=name)
        if kind == "folded":  # close together: labelled in a column at their right, a line to each point
            _column_labels(ax, rows, precision)
            continue
        for i, r in enumerate(rows):  # placed so that neighbours' labels do not overlap
            shipped = "(shipped)" in r["design"]
            below = kind == "separable" and i % 2 == 0
            ax.annotate(r["design"].replace(" (shipped)", "*"), (r["flop_ratio"], r[precision]["frames_per_s"]),
                        textcoords="offset points", xytext=(-5 if shipped else 5, -12 if below else 4),
                        ha="right" if shipped else "left", fontsize="small")
    ax.axvline(0.25, color="k", linestyle=":", linewidth=1.0, label="a quarter of the small model (issue 77)")
    ax.set_xlabel("FLOPs per 256² frame ÷ the small model's")
    ax.set_ylabel(f"network frames/s (OpenVINO {precision}, {rec['threads']} threads)")
    ax.set_xlim(0, None)
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", ncol=2, fontsize="small")  # two rows under the points; labels fill the rest
    ax.set_title("arithmetic is not time on a CPU: * shipped", loc="left", fontsize="medium")
    fig.savefig(out, dpi=110)


def _column_labels(ax, rows: list[dict], precision: str) -> None:
    """Labels of ``rows`` in a column right of the rightmost, top to bottom in the points' order, at least 6 % of the
    highest point's frames/s apart, each joined to its point by a thin line."""
    points = sorted(((r["flop_ratio"], r[precision]["frames_per_s"], r["design"]) for r in rows), key=lambda p: -p[1])
    top = max(y for _, y, _ in points)
    gap = 0.06 * top
    x_text = max(x for x, _, _ in points) + 0.06
    y_text = None
    for x, y, name in points:
        y_text = y if y_text is None else min(y, y_text - gap)
        ax.annotate(name, (x, y), xytext=(x_text, y_text), textcoords="data", va="center", fontsize="small",
                    arrowprops={"arrowstyle": "-", "color": "0.5", "linewidth": 0.6, "shrinkA": 2, "shrinkB": 4})


def _kind(row: dict) -> str:
    """A row's block kind (records written before folded designs have ``separable`` only)."""
    return row.get("kind", "separable" if row["separable"] else "standard")


def _rates(rec: dict, kind: str) -> str:
    rates = [r["gflop_per_frame"] * r["bf16"]["frames_per_s"] for r in rec["rows"] if _kind(r) == kind]
    return f"{min(rates):.0f}-{max(rates):.0f}" if rates else "n/a"


def report(rec: dict, out: Path) -> None:
    from decode_mem.io.atomic import atomic_output

    lines = ["# Light network designs for CPUs: arithmetic against speed", "",
             f"`{rec['command']}`, {rec['minutes']:.1f} min", "", f"Machine: {rec['machine']}", "",
             __doc__.split("\n\n", 2)[2].strip(), "",
             "| design | features / per-frame | parameters | receptive field (px) | GFLOP per 256² frame | ÷ small's | "
             "OpenVINO bf16 frames/s (compiled) | ÷ small's | fp32 frames/s | ÷ small's |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rec["rows"]:
        lines.append(f"| {r['design']} | {r['features']} / {r['inter_features']} | {r['parameters']} | "
                     f"{r.get('receptive_field_px', 'n/a')} | "
                     f"{r['gflop_per_frame']:.2f} | {r['flop_ratio']:.3f} | {r['bf16']['frames_per_s']:.1f} "
                     f"({r['bf16']['compiled']}) | {r['bf16']['speed_ratio']:.2f}x | {r['fp32']['frames_per_s']:.1f} | "
                     f"{r['fp32']['speed_ratio']:.2f}x |")
    light = next(r for r in rec["rows"] if r["design"].startswith("light"))
    lines += ["", "## What it says", ""]
    for kind in ("separable", "folded"):
        quarter = [r for r in rec["rows"] if _kind(r) == kind and r["flop_ratio"] <= 0.25]
        faster = [r for r in quarter if r["bf16"]["frames_per_s"] > light["bf16"]["frames_per_s"]]
        lines.append(f"- {kind.capitalize()} designs within a quarter of the small model's arithmetic: "
                     f"{', '.join(r['design'] for r in quarter) or 'none'}; faster than the shipped light model in "
                     f"bf16: {', '.join(r['design'] for r in faster) or 'none'}.")
    lines += [f"- Arithmetic rate in bf16 (GFLOP per frame × frames/s): standard designs "
              f"{_rates(rec, 'standard')}, separable designs {_rates(rec, 'separable')}, folded designs "
              f"{_rates(rec, 'folded')} GFLOP/s.",
              "", f"![light designs]({out.with_suffix('.png').name})"]
    with atomic_output(out) as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    with atomic_output(out.with_suffix(".json")) as tmp:
        tmp.write_text(json.dumps(rec, indent=1))
    figure(rec, out.with_suffix(".png"))
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="OpenVINO / torch threads (default 2)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=str(RESULTS / "light_designs.md"))
    args = ap.parse_args()
    from command_line import command_line
    from machine import commit, load_average, machine_line

    at, load0, t0 = commit(), load_average(), time.perf_counter()
    rec = measure(args)
    rec["command"] = command_line()
    rec["minutes"] = (time.perf_counter() - t0) / 60
    rec["machine"] = machine_line(args.threads, load_start=load0, at=at)
    report(rec, Path(args.out))


if __name__ == "__main__":
    main()
