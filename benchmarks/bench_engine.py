"""Tiled streaming inference engine: memory vs stack length and frame size, speed, and MONAI.

    python benchmarks/bench_engine.py                  # CPU, 1 torch thread: ~6-8 min on 2 (shared) cores
    python benchmarks/bench_engine.py --device cuda    # the same cases on a GPU
    python benchmarks/bench_engine.py --quick          # smoke run, tiny sizes, report in the temp folder

(a) peak RssAnon while streaming 1k vs 16k frames (64x64 uint16 TIFF, memory-mapped) through predict_stack;
(b) peak memory for 512^2 / 2048^2 / 4096^2 frames at chunk 512, and the whole-frame forward for contrast;
(c) frames/s end to end vs the bare network calls on the same tiles, feature reuse vs 3x recompute;
(d) the executor vs MONAI sliding_window_inference with the same model and tile size: time, peak memory and
    max deviation from the whole-frame output.
Every case runs in a fresh subprocess (peaks do not mix); memory comes from decode_mem.memory (RssAnon
sampled every 10 ms, CUDA allocator peaks). Writes benchmarks/results/engine.md and engine.png.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from command_line import command_line
from machine import machine_line

RESULTS = Path(__file__).parent / "results"
MODEL = {"depth": 2, "features": 8, "inter_features": 8, "p_bias_init": -2.0}  # ModelConfig.tiny(...)
B_FRAMES = 2  # frames per stack in (b): a 4096^2 frame takes ~1 min on 2 CPU cores with the tiny model


# ----------------------------------------------------------------------------- child side
def _net(device: str):
    import torch

    from decode_mem.model import DecodeNet, ModelConfig

    torch.manual_seed(0)
    net = DecodeNet(ModelConfig(**MODEL)).eval().to(device)
    with torch.no_grad():  # random weights, p head scaled so that a few % of pixels are detections
        net.heads["p"][-1].weight.mul_(5.0)
    return net


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def child_stream(a: dict) -> dict:
    """predict_stack over a TIFF of raw ADU frames; RssAnon after every block."""
    from decode_mem.infer.predict import predict_stack
    from decode_mem.io import open_stack
    from decode_mem.io.camera import Camera
    from decode_mem.memory import measure_phase, read_host_memory

    net, dev = _net(a["device"]), a["device"]
    series, n_emitters = [], 0

    def on_block(block) -> None:
        series.append((block.t0 + block.n_frames, read_host_memory()["rss_anon_mb"]))

    with open_stack(a["path"]) as stack:
        base = read_host_memory()["rss_anon_mb"]
        with measure_phase("stream", interval=0.01, device=dev) as peak:
            t0 = time.perf_counter()
            gen = predict_stack(stack, net, chunk_size=a["chunk"], batch_size=a["batch"], device=dev,
                                camera=Camera.emccd(), on_block=on_block)
            for table in gen:
                n_emitters += len(table)
            _sync(dev)
            seconds = time.perf_counter() - t0
        frames = stack.shape[0]
    return {"frames": frames, "seconds": seconds, "fps": frames / seconds, "emitters": n_emitters,
            "base_mb": base, "peak_mb": peak.rss_anon_mb, "cuda_peak_mb": peak.cuda_max_allocated_mb,
            "series": series}


def child_whole(a: dict) -> dict:
    """The whole-frame forward (no tiles) on the first window of a stack, for contrast."""
    import torch

    from decode_mem.io import open_stack
    from decode_mem.io.camera import Camera
    from decode_mem.memory import measure_phase, read_host_memory

    net, dev = _net(a["device"]), a["device"]
    with open_stack(a["path"]) as stack:
        window = Camera.emccd().to_photons(np.stack([stack[0], stack[0], stack[min(1, len(stack) - 1)]]))[None]
    base = read_host_memory()["rss_anon_mb"]
    with measure_phase("whole", interval=0.01, device=dev) as peak, torch.inference_mode():
        t0 = time.perf_counter()
        out = net(torch.from_numpy(window).to(dev)).cpu()
        seconds = time.perf_counter() - t0
    del out
    return {"seconds": seconds, "base_mb": base, "peak_mb": peak.rss_anon_mb,
            "cuda_peak_mb": peak.cuda_max_allocated_mb}


def _photons(t: int, h: int, w: int) -> np.ndarray:
    return (100 + 400 * np.random.default_rng(0).random((t, h, w))).astype(np.float32)


def child_speed(a: dict) -> dict:
    """End to end vs the bare network calls on the same tiles; reuse vs recompute. Rounds interleaved."""
    import torch

    from decode_mem.postprocess import MARGIN, PostprocessConfig, output_to_emitters
    from decode_mem.tiling import ArrayStack, TileConfig, TiledExecutor

    net, dev = _net(a["device"]), a["device"]
    stack = _photons(a["frames"], a["size"], a["size"])
    pp = PostprocessConfig()

    def executor(reuse: bool) -> TiledExecutor:
        cfg = TileConfig(chunk_size=a["chunk"], batch_size=a["batch"], block=a["block"], margin=MARGIN,
                         reuse_features=reuse)
        return TiledExecutor(net, stack.shape[1:], cfg, device=dev)

    def consume(tile, frames, output):
        return len(output_to_emitters(output, frames, config=pp, offset=tile.offset, core=tile.core_in_keep))

    def end_to_end(reuse: bool) -> float:
        t0 = time.perf_counter()
        for _ in executor(reuse).run(ArrayStack(stack), consume):
            pass
        _sync(dev)
        return time.perf_counter() - t0

    # the same units of work (the executor's own grouping: TiledExecutor.run_unit), inputs made on the device
    # beforehand: only the network calls are timed; each unit computes its two context frames itself
    ex = executor(True)
    ly, lx = ex.grid.tile_shape
    units = []
    for t0 in range(0, len(stack), a["block"]):
        n = min(a["block"], len(stack) - t0)
        run = min(n, ex.batch_size)
        group = max(1, min(len(ex.grid), (ex.batch_size + 2) // (run + 2)))
        for _ in range(0, len(ex.grid), group):
            for r0 in range(0, n, run):
                k = min(run, n - r0)
                units.append((k, torch.rand((group, k + 2, ly, lx), device=dev) * 400 + 100))

    def bare(reuse: bool) -> float:
        _sync(dev)
        t0 = time.perf_counter()
        with torch.inference_mode():
            for k, x in units:
                if reuse:  # the executor's network call: the frame U-Net once per frame of the unit
                    ex.run_unit(k, data=x)
                else:  # DecodeNet.forward on each window of the same tiles: the frame U-Net 3x per frame
                    g = x.shape[0]
                    windows = torch.stack([x[:, j:j + k] for j in range(3)], dim=2)
                    net(windows.reshape(g * k, 3, ly, lx))
        _sync(dev)
        return time.perf_counter() - t0

    runs = {"engine": lambda: end_to_end(True), "engine, recompute": lambda: end_to_end(False),
            "bare calls, reuse": lambda: bare(True), "bare forward, recompute": lambda: bare(False)}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for fn in runs.values():  # warm-up, not timed: the first call of each shape sets up oneDNN / cuDNN kernels
        fn()
    for _ in range(a["rounds"]):
        for name, fn in runs.items():
            times[name].append(fn())
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {"frames": len(stack), "seconds": med, "all": times, "fps": {k: len(stack) / v for k, v in med.items()},
            "plan": str(ex.grid), "batch": ex.batch_size, "block": a["block"]}


def child_compare(a: dict) -> dict:
    """One way of getting full output maps for a stack; the maps are saved for the deviation."""
    import torch

    from decode_mem.memory import measure_phase, read_host_memory
    from decode_mem.tiling import ArrayStack, TileConfig, TiledExecutor

    net, dev = _net(a["device"]), a["device"]
    stack = _photons(a["frames"], a["size"], a["size"])
    t = len(stack)
    base = read_host_memory()["rss_anon_mb"]
    with measure_phase(a["how"], interval=0.01, device=dev) as peak, torch.inference_mode():
        t0 = time.perf_counter()
        if a["how"] == "decode_mem":
            out = np.empty((t, 10, *stack.shape[1:]), np.float32)

            def consume(tile, frames, output):
                cy, cx = tile.core_in_keep
                out[frames, :, tile.core[0], tile.core[1]] = output[:, :, cy, cx].cpu().numpy()

            ex = TiledExecutor(net, stack.shape[1:], TileConfig(chunk_size=a["chunk"], batch_size=a["batch"]),
                               device=dev)
            for _ in ex.run(ArrayStack(stack), consume):
                pass
        elif a["how"] == "whole":
            out = np.empty((t, 10, *stack.shape[1:]), np.float32)
            for i in range(t):  # one window at a time
                idx = np.clip(np.arange(i - 1, i + 2), 0, t - 1)
                out[i] = net(torch.from_numpy(stack[idx][None]).to(dev))[0].cpu().numpy()
        else:
            from monai.inferers import sliding_window_inference

            idx = np.clip(np.arange(t)[:, None] + np.arange(-1, 2)[None], 0, t - 1)
            windows = torch.from_numpy(stack[idx])  # MONAI wants the whole (N, C, H, W) input
            out = sliding_window_inference(windows, (a["roi"], a["roi"]), a["batch"], net, overlap=a["overlap"],
                                           mode=a["mode"], sw_device=dev, device="cpu").numpy()
        _sync(dev)
        seconds = time.perf_counter() - t0
    np.save(a["save"], out)
    return {"seconds": seconds, "fps": t / seconds, "base_mb": base, "peak_mb": peak.rss_anon_mb,
            "cuda_peak_mb": peak.cuda_max_allocated_mb}


CHILDREN = {"stream": child_stream, "whole": child_whole, "speed": child_speed, "compare": child_compare}


# ----------------------------------------------------------------------------- parent side
def run_child(kind: str, args: dict, threads: int) -> dict:
    cmd = [sys.executable, __file__, "--threads", str(threads), "--child", kind, json.dumps(args)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"{kind} {args} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"  {kind} {({k: v for k, v in args.items() if k not in ('path', 'save')})}: "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    return result


def write_tiff(path: Path, t: int, h: int, w: int) -> Path:
    """Raw uint16 ADU frames, generated block by block (bounded memory) into one contiguous (T, H, W) series,
    so open_stack memory-maps it."""
    import tifffile

    def frames():
        rng = np.random.default_rng(1)
        for t0 in range(0, t, 256):
            yield from (100 + rng.poisson(360.0, size=(min(256, t - t0), h, w))).astype(np.uint16)  # EMCCD-like

    tifffile.imwrite(path, frames(), shape=(t, h, w), dtype="uint16", photometric="minisblack")
    return path


def machine(device: str, threads: int) -> dict:
    import torch

    info = {"line": machine_line(threads), "numpy": np.__version__, "os": platform.platform(), "threads": threads}
    try:
        import monai

        info["monai"] = monai.__version__
    except ImportError:
        info["monai"] = None
    with open("/proc/meminfo") as f:
        info["ram_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    info["gpu"] = torch.cuda.get_device_name(0) if device.startswith("cuda") else "none (not used)"
    return info


def geometry(size: int, chunk: int) -> dict:
    """What the executor plans for the benchmark's model: receptive field, halo, tile side, 4096² block length."""
    from decode_mem.tiling import TileConfig, TiledExecutor, block_length

    net = _net("cpu")
    ex = TiledExecutor(net, (size, size), TileConfig(chunk_size=chunk, batch_size=4), device="cpu")
    tile = int(ex.grid.tile_shape[0])
    n = block_length((4096, 4096), 2, "auto")
    return {"block64": block_length((64, 64), 2, "auto"), "receptive_field": int(net.receptive_field()),
            "tile": tile, "halo": (tile - chunk) // 2,
            "block4096": n, "block4096_mib": (n + 2) * 4096 * 4096 * 2 / 2**20}


def deviation(ref: np.ndarray, out: np.ndarray) -> float:
    from decode_mem.model import ModelConfig

    scales = np.asarray(ModelConfig(**MODEL).output_scales(), np.float32)[None, :, None, None]
    return float(np.max(np.abs(out - ref) / scales))


def _mb(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f}"


def report(res: dict, png: str) -> str:
    m = res["machine"]
    cuda = m["gpu"] != "none (not used)"
    lines = [
        "# Inference engine benchmark: memory vs stack length and frame size, speed, MONAI",
        "",
        f"Command: `{res['command']}` (total {res['total_s']:.0f} s; every case in a fresh subprocess).",
        "",
        f"Machine: {m['line']} plus the working tree at run time; {m['ram_gib']} GiB RAM, {m['os']}; "
        f"GPU: {m['gpu']}. Versions: numpy {m['numpy']}, MONAI {m['monai'] or 'not installed'}.",
        f"Load average at the end of the run: {res['load']}; ratios were measured side by side in one process.",
        "",
        f"Model: `DecodeNet(ModelConfig.tiny(p_bias_init=-2))` (depth 2, 8 features; receptive field "
        f"{res['geometry']['receptive_field']} px, halo {res['geometry']['halo']} px each side as the executor "
        "plans it), random weights with the p head scaled x5 so that a few %",
        "of the pixels are detections and post-processing does real work. Frames are synthetic. Host memory is",
        "RssAnon (memory-mapped file pages are RssFile and excluded), sampled every 10 ms by",
        "`decode_mem.memory.measure_phase`; 'before' is RssAnon after the model and the stack were set up.",
        "",
        "## (a) Memory vs stack length (64x64 uint16 TIFF, memory-mapped; chunk 512, batch 16, block auto = "
        f"{res['geometry']['block64']})",
        "",
        "| frames | s | frames/s | emitters | RssAnon before MiB | peak RssAnon MiB | peak - before MiB |"
        + (" CUDA max allocated MiB |" if cuda else ""),
        "|---|---|---|---|---|---|---|" + ("---|" if cuda else ""),
    ]
    for n, r in res["a"].items():
        lines.append(f"| {n} | {r['seconds']:.1f} | {r['fps']:.0f} | {r['emitters']} | {_mb(r['base_mb'])} | "
                     f"{_mb(r['peak_mb'])} | {_mb(r['peak_mb'] - r['base_mb'])} |"
                     + (f" {_mb(r['cuda_peak_mb'])} |" if cuda else ""))
    (n1, r1), (n2, r2) = list(res["a"].items())
    tail = [mb for _, mb in r2["series"][len(r2["series"]) // 10:]]  # after the first tenth of the blocks
    lines += ["", f"{int(n2) // int(n1)}x the frames: peak RssAnon {r2['peak_mb']:.0f} vs {r1['peak_mb']:.0f} MiB "
              f"(ratio {r2['peak_mb'] / r1['peak_mb']:.2f}); over the last nine tenths of the {n2}-frame run RssAnon "
              f"after each block stayed within {min(tail):.0f}–{max(tail):.0f} MiB." if tail else "", ""]

    per_call = 4 // B_FRAMES
    lines += [f"## (b) Memory vs frame size ({B_FRAMES} frames each, uint16 TIFF; chunk 512, batch 4, block auto)",
              "", f"'input held' = the block of raw frames with its two context frames, ({B_FRAMES} + 2) x H x W x 2",
              "bytes: the part of the executor's memory that grows with the frame (blocks are whole frames).",
              "The rest, the working set, is set by the tile shape and the tiles per network call: a frame smaller",
              "than chunk + 2 halo is one tile of its own size (one per call); larger frames use "
              f"{res['geometry']['tile']}x{res['geometry']['tile']} tiles,",
              f"here {per_call} per call (batch 4 = {B_FRAMES} windows x {per_call} tiles). The whole-frame forward",
              "is `DecodeNet.forward` on one full window; it grows with the frame.", "",
              "| frame | s | peak - before MiB | input held MiB | peak - before - input MiB | "
              "whole-frame forward, peak - before MiB |" + (" CUDA max allocated MiB |" if cuda else ""),
              "|---|---|---|---|---|---|" + ("---|" if cuda else "")]
    for size, r in res["b"].items():
        held = (B_FRAMES + 2) * int(size) ** 2 * 2 / 2**20
        whole = r.get("whole")
        lines.append(f"| {size}x{size} | {r['seconds']:.1f} | {_mb(r['peak_mb'] - r['base_mb'])} | {held:.0f} | "
                     f"{_mb(r['peak_mb'] - r['base_mb'] - held)} | "
                     f"{_mb(whole['peak_mb'] - whole['base_mb']) if whole else 'not run (too big)'} |"
                     + (f" {_mb(r['cuda_peak_mb'])} |" if cuda else ""))

    c = res["c"]
    t = c["seconds"]
    lines += ["", f"## (c) Speed ({c['frames']} frames, {c['plan']}, batch {c['batch']}, block 8)", "",
              "engine = executor + post-processing from an in-memory stack; 'bare calls, reuse' = the executor's",
              "own units of work (`TiledExecutor.run_unit`) on inputs made on the device beforehand (no reading,",
              "staging or post-processing; each unit computes its two context frames, which the engine carries",
              "from one run of windows to the next);",
              "'bare forward, recompute' = `DecodeNet.forward` on each window of the same tiles (the frame U-Net 3x",
              f"per frame, as DECODE). Median of {len(c['all']['engine'])} interleaved rounds after a warm-up round.",
              "",
              "| run | s | frames/s |", "|---|---|---|"]
    lines += [f"| {k} | {v:.2f} | {c['fps'][k]:.2f} |" for k, v in t.items()]
    ratio_e = t["bare calls, reuse"] / t["engine"]
    ratio_r = t["bare forward, recompute"] / t["bare calls, reuse"]
    ratio_er = t["engine, recompute"] / t["engine"]
    bound = 3 / ((c["block"] + 2) / c["block"])
    lines += ["", f"- engine vs bare calls on the same tiles: **{ratio_e:.2f}x** (target >= 0.9: "
              f"{'met' if ratio_e >= 0.9 else 'missed'})",
              f"- feature reuse vs 3x recompute, bare: **{ratio_r:.2f}x**; end to end: {ratio_er:.2f}x "
              f"(target >= 1.5: {'met' if ratio_r >= 1.5 else 'missed'}). Counting frame-U-Net passes alone bounds",
              f"  the gain at 3 / ((b + 2) / b) = {bound:.2f}x for blocks of b = {c['block']}"
              + _against_bound({"bare": ratio_r, "end to end": ratio_er}, bound), ""]

    d, ds = res["d"], res["d_setup"]
    lines += [f"## (d) vs MONAI `sliding_window_inference` ({ds['frames']} frames of {ds['size']}x{ds['size']}, "
              f"tiles of {ds['roi']} px, batch {ds['batch']})", "",
              "All produce the full (T, 10, H, W) output maps (MONAI stitches on the CPU, `device='cpu'`), compared",
              "with the whole-frame forward per window. Deviation = max |tiled - whole| / channel unit",
              f"(`ModelConfig.output_scales()`). decode_mem: chunk {ds['chunk']} + halo {res['geometry']['halo_d']} "
              f"each side = {ds['roi']} px, the tile MONAI gets too.",
              "", "| method | s | frames/s | peak - before MiB | max deviation from whole frame |",
              "|---|---|---|---|---|"]
    for name, r in d.items():
        lines.append(f"| {name} | {r['seconds']:.1f} | {r['fps']:.2f} | {_mb(r['peak_mb'] - r['base_mb'])} | "
                     f"{r['max_dev']:.2e} |")
    if not res["machine"]["monai"]:
        lines.append("\nMONAI is not installed (`pip install monai`): its rows were not measured.")
    lines += ["", "## Not measured", "",
              "- " + ("CUDA: measured on " + m["gpu"] if cuda else
                      "No GPU in this run: nothing was measured on CUDA. `--device cuda` runs the same cases on a "
                      "GPU (adds CUDA allocator peaks)."),
              "- The input block is whole frames (plus one context frame each side); with `block='auto'` a 4096x4096",
              f"  uint16 block is {res['geometry']['block4096']} frames ({res['geometry']['block4096_mib']:.0f} MiB "
              "with its context frames), plus one block read ahead. That part of host memory does grow with the",
              "  frame size; everything else does not.",
              "- The whole-frame forward at 4096x4096 was not run.",
              "", f"![engine]({png})", ""]
    return "\n".join(lines)


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for n, r in res["a"].items():
        xs, ys = zip(*r["series"], strict=True) if r["series"] else ((), ())
        ax[0].plot(xs, ys, marker=".", label=f"{n} frames")
    ax[0].set(xlabel="frames processed", ylabel="RssAnon after each block (MiB)", title="(a) stack length")
    top = max((y for r in res["a"].values() for _, y in r["series"]), default=1.0)
    ax[0].set_ylim(0, 1.3 * top)  # room above the flat lines for the legend
    ax[0].legend(loc="lower right")
    sizes = list(res["b"])
    tiled = [res["b"][s]["peak_mb"] - res["b"][s]["base_mb"] for s in sizes]
    whole = [res["b"][s]["whole"]["peak_mb"] - res["b"][s]["whole"]["base_mb"] if "whole" in res["b"][s] else 0
             for s in sizes]
    xs = np.arange(len(sizes))
    ax[1].bar(xs - 0.2, tiled, 0.4, label="decode_mem, chunk 512")
    ax[1].bar(xs + 0.2, whole, 0.4, label="whole-frame forward (none: not run)")
    ax[1].set_xticks(xs, [f"{s}²" for s in sizes])
    ax[1].set(ylabel="peak RssAnon - before (MiB)", title="(b) frame size")
    ax[1].legend()
    fps = res["c"]["fps"]
    ax[2].barh(list(fps), list(fps.values()))
    ax[2].set(xlabel="frames/s", title=f"(c) speed, {res['c']['plan'].split(':')[0][9:]} frames")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _against_bound(ratios: dict[str, float], bound: float) -> str:
    """What the report says of the measured reuse ratios against the count of frame-U-Net passes."""
    above = [name for name, r in ratios.items() if r > bound]
    if not above:
        return "; both measured ratios are within that bound."
    return (f"; the {' and the '.join(above)} ratio{'s are' if len(above) > 1 else ' is'} above that bound: the "
            "recompute path does more than three frame-U-Net passes' work per frame on this CPU (its 3x larger "
            "batches; not investigated).")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks that the script runs")
    p.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(CHILDREN[args.child[0]](json.loads(args.child[1]))))
        return 0

    q, dev, th = args.quick, args.device, args.threads
    work = Path(tempfile.mkdtemp(prefix="bench_engine_", dir=args.workdir))
    start = time.perf_counter()
    res: dict = {"machine": machine(dev, th), "command": command_line(argv)}
    res["geometry"] = geometry(4096, 512)
    try:
        print("(a) stack length", flush=True)
        lengths = (100, 400) if q else (1000, 16000)
        res["a"] = {n: run_child("stream", {"path": str(write_tiff(work / f"len{n}.tif", n, 64, 64)), "chunk": 512,
                                            "batch": 16, "device": dev}, th) for n in lengths}
        print("(b) frame size", flush=True)
        sizes = (128, 256, 512) if q else (512, 2048, 4096)
        res["b"] = {}
        for s in sizes:
            path = write_tiff(work / f"size{s}.tif", B_FRAMES, s, s)
            res["b"][s] = run_child("stream", {"path": str(path), "chunk": 128 if q else 512, "batch": 4,
                                               "device": dev}, th)
            if s <= (256 if q else 2048):
                res["b"][s]["whole"] = run_child("whole", {"path": str(path), "device": dev}, th)
            path.unlink()
        print("(c) speed", flush=True)
        res["c"] = run_child("speed", {"size": 128 if q else 256, "frames": 8, "chunk": 64 if q else 128,
                                       "batch": 8, "block": 8, "rounds": 1 if q else 3, "device": dev}, th)
        print("(d) MONAI", flush=True)
        size, frames, chunk = (256, 2, 64) if q else (512, 4, 256)
        roi = geometry(size, chunk)["tile"]  # the executor's own tile (chunk + 2 halo): MONAI gets the same
        res["geometry"]["halo_d"] = (roi - chunk) // 2
        common = {"size": size, "frames": frames, "batch": 8, "device": dev, "chunk": chunk, "roi": roi}
        res["d_setup"] = common
        runs = {"whole": {"how": "whole"}, "decode_mem": {"how": "decode_mem"}}
        if res["machine"]["monai"]:
            runs["monai gaussian, overlap 0.25"] = {"how": "monai", "mode": "gaussian", "overlap": 0.25}
            runs[f"monai constant, overlap {(roi - chunk) / roi:.3f}"] = {"how": "monai", "mode": "constant",
                                                                         "overlap": (roi - chunk) / roi}
        res["d"] = {}
        for name, extra in runs.items():
            save = work / f"{extra['how']}_{len(res['d'])}.npy"
            res["d"][name] = run_child("compare", {**common, **extra, "save": str(save)}, th)
            res["d"][name]["save"] = str(save)
        ref = np.load(res["d"]["whole"]["save"])
        for row in res["d"].values():
            row["max_dev"] = deviation(ref, np.load(row["save"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["total_s"] = time.perf_counter() - start
    res["load"] = " / ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"
    out = Path(tempfile.gettempdir()) / "engine_quick" if q else RESULTS / "engine"  # quick runs are not results
    plot(res, out.with_suffix(".png"))
    out.with_suffix(".md").write_text(report(res, out.with_suffix(".png").name))
    print(f"wrote {out.with_suffix('.md')} ({res['total_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
