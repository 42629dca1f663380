"""Whether the int8 engine may stand in for fp32 for a model: checked once, on windows of its own training physics.

``--engine auto`` takes ``openvino-int8`` (``model.int8``) only where its localizations match fp32's within
``TOLERANCE``, the tolerance ``benchmarks/bench_cpu_engines.py`` applies to it: against the ground truth its
Jaccard at most 0.005 below fp32's and its lateral RMSE at most 0.5 nm above fp32's; against fp32's own emitters
(matched within 50 nm) a mean position shift below 1 nm and photon counts within 2 % on average.

The windows (``CHECK_WINDOWS`` of ``CHECK_SIDE``² px, 3 frames each) are simulated from the checkpoint's training
physics (``simulate.simulate_windows``: each window its own density, PSF, background, camera and pixel size from
the model's envelope) with another seed than int8's calibration windows, so the check is made on data the
quantization did not see. fp32 is torch's own modules; both outputs go through the same post-processing
(``postprocess.output_to_emitters``), positions are compared in nm (each window with its own pixel size).

The verdict is kept beside the quantized model (``VERDICT_FILE`` in ``model.engine.int8_folder``: the same
weights, model code, runtime versions and physics; one per precision of the layers int8 keeps in float, as the run
compiles them), so each machine checks a model once; a verdict made with other check settings (``CHECK_KEY``) is
made again. A verdict that failed says which number was out and by how much.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

CHECK_WINDOWS = 256  # 13791 emitters of the shipped model's physics; half as many windows moved its RMSE change
# from -0.18 to -0.45 nm (the RMSE of the envelope's dim emitters is noisy), too near the tolerance
CHECK_SIDE = 64  # px (int8's calibration windows: the same side, another seed)
CHECK_SEED = 2  # model.int8.CALIBRATION_SEED is 1
CHECK_BATCH = 16  # windows per network call (memory: a few tens of MiB at 64²)
VERDICT_FILE = "verdict-{precision}.json"  # per precision of the layers int8 keeps in float (fp32, or bf16)


@dataclass(frozen=True)
class Int8Tolerance:
    """How far int8's localizations may be from fp32's (``bench_cpu_engines`` reports against the same numbers).

    jaccard     largest loss of Jaccard against the truth (fp32's minus int8's)
    rmse_nm     largest increase of the lateral RMSE against the truth, nm (int8's minus fp32's; one-sided, as the
                Jaccard: an int8 that localizes better is no reason to refuse it)
    shift_nm    largest mean shift (x or y) of int8's emitters from fp32's, matched within ``match_nm``
    photons     largest |mean photon ratio − 1| of those matched emitters
    """

    jaccard: float = 0.005
    rmse_nm: float = 0.5
    shift_nm: float = 1.0
    photons: float = 0.02
    match_nm: float = 50.0

    def failures(self, numbers: dict[str, float]) -> list[str]:
        """What is outside the tolerance in ``numbers`` (``compare``'s keys), one phrase each; empty: held. A
        number that could not be computed (NaN) fails."""
        checks = (("Jaccard loss", numbers["jaccard_loss"], self.jaccard, "{:.4f}"),
                  ("RMSE increase", numbers["rmse_change_nm"], self.rmse_nm, "{:.2f} nm"),
                  ("mean shift", numbers["shift_nm"], self.shift_nm, "{:.2f} nm"),
                  ("photon bias", abs(numbers["photons_bias"]), self.photons, "{:.1%}"))
        return [f"{name} {fmt.format(value) if np.isfinite(value) else 'n/a'} > {fmt.format(limit)}"
                for name, value, limit, fmt in checks if not value <= limit]


TOLERANCE = Int8Tolerance()
CHECK_KEY = f"{CHECK_WINDOWS} windows of {CHECK_SIDE}² px, seed {CHECK_SEED}; {asdict(TOLERANCE)}"


@dataclass(frozen=True)
class Int8Verdict:
    """The check's outcome: ``passed``, its numbers (``compare``'s), what failed, and the check's settings.
    ``engine``: the int8 engine loaded for the check (not kept on disk), for the caller to use."""

    passed: bool
    numbers: dict[str, Any]
    failed: tuple[str, ...] = ()
    check: str = CHECK_KEY
    engine: Any = field(default=None, compare=False, repr=False)

    def line(self) -> str:
        """One line: passed or failed, and the numbers."""
        n = self.numbers
        if "error" in n:
            return f"int8 could not be checked against fp32 ({n['error']})"
        def num(key: str, fmt: str) -> str:  # a number that could not be computed (NaN): n/a, as in ``failed``
            return format(n[key], fmt) if math.isfinite(n[key]) else "n/a"

        numbers = (f"Jaccard {num('jaccard_int8', '.4f')} against fp32's {num('jaccard_fp32', '.4f')}, RMSE "
                   f"{num('rmse_int8_nm', '.2f')} against {num('rmse_fp32_nm', '.2f')} nm, mean shift "
                   f"{num('shift_nm', '.2f')} nm, photons {num('photons_bias', '+.1%')}; {int(n['n_truth'])} "
                   "emitters of the model's training physics")
        if self.passed:
            return f"int8 verified against fp32 ({numbers})"
        return f"int8 failed its check against fp32: {'; '.join(self.failed)} ({numbers})"

    def as_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "numbers": self.numbers, "failed": list(self.failed), "check": self.check}


def compare(fp32: Any, int8: Any, truth: Any, tolerance: Int8Tolerance = TOLERANCE) -> dict[str, float]:
    """The numbers the tolerance is about, for two EmitterTables of the same frames and their ``truth`` (x, y in nm,
    frames shared): Jaccard and lateral RMSE of each against the truth (250 nm), the mean shift and photon ratio of
    int8's emitters against fp32's (matched within ``tolerance.match_nm``)."""
    from decode_mem.evaluate.metrics import evaluate, match_emitters

    a, b = evaluate(fp32, truth, pixel_size=1.0), evaluate(int8, truth, pixel_size=1.0)
    v = evaluate(int8, fp32, pixel_size=1.0, tolerance_lat=tolerance.match_nm)
    pairs = match_emitters(int8, fp32, pixel_size=1.0, tolerance_lat=tolerance.match_nm)
    ratio = np.asarray(int8["photons"], np.float64)[pairs.pred_index] / \
        np.asarray(fp32["photons"], np.float64)[pairs.gt_index] - 1
    return {"jaccard_fp32": a.jaccard, "jaccard_int8": b.jaccard, "jaccard_loss": a.jaccard - b.jaccard,
            "rmse_fp32_nm": a.rmse_lat, "rmse_int8_nm": b.rmse_lat, "rmse_change_nm": b.rmse_lat - a.rmse_lat,
            "shift_nm": max(abs(v.bias_x), abs(v.bias_y)),
            "photons_bias": float(np.mean(ratio)) if len(ratio) else float("nan"), "n_truth": float(len(truth))}


def check_int8(net: Any, engine: Any, simulation: dict[str, Any], windows: int = CHECK_WINDOWS,
               tolerance: Int8Tolerance = TOLERANCE) -> Int8Verdict:
    """``engine`` (an int8 engine of ``net``) against ``net`` in fp32 on ``windows`` windows simulated from
    ``simulation`` (module docstring)."""
    import torch

    from decode_mem.footprint.heap import release_free_heap
    from decode_mem.io.table import EmitterTable
    from decode_mem.postprocess import PostprocessConfig, output_to_emitters
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.dataset import simulate_windows

    cfg = replace(SimulationConfig.from_dict(simulation), frame_size=(CHECK_SIDE, CHECK_SIDE))
    gen = torch.Generator().manual_seed(CHECK_SEED)
    post = PostprocessConfig()
    tables: dict[str, list[EmitterTable]] = {"fp32": [], "int8": [], "truth": []}
    for w0 in range(0, windows, CHECK_BATCH):
        b = min(CHECK_BATCH, windows - w0)
        with warnings.catch_warnings():  # a crowded window keeps its brightest emitters: irrelevant here
            warnings.simplefilter("ignore", RuntimeWarning)
            wb = simulate_windows(cfg, b, gen)
        px = np.array([c.pixel_size for c in wb.physics.cameras], np.float64)  # nm per px, per window
        with torch.inference_mode():
            x = net.normalize(wb.frames, net.frame_level(wb.frames), wb.read_var[:, None]).float()
            n, _, c, h, w = x.shape
            flat = x.reshape(n * 3, c, h, w).contiguous()
            for name, calls in (("fp32", (net.frame_features, net.temporal)),
                                ("int8", (engine.frame_features, engine.temporal))):
                f = calls[0](flat).float()
                f = f.view(n, 3, *f.shape[1:])
                out = calls[1](f[:, 0].contiguous(), f[:, 1].contiguous(), f[:, 2].contiguous()).float()
                table = output_to_emitters(out, np.arange(w0, w0 + b), config=post, frame_shape=(h, w))
                tables[name].append(_in_nm(table, px[table["frame"] - w0]))
        em, mask = wb.em.numpy(), wb.mask.numpy()
        idx, k = np.nonzero(mask)
        truth = {"frame": idx + w0, "x": em[idx, k, 0], "y": em[idx, k, 1], "z": em[idx, k, 2],
                 "photons": em[idx, k, 3], "bg": np.zeros(len(idx))}
        tables["truth"].append(_in_nm(EmitterTable(truth), px[idx]))
    del wb, x, flat, f, out
    release_free_heap()  # the check's working set is not kept in RssAnon for the run that follows
    fp32, int8, truth = (EmitterTable.concat(tables[k]) for k in ("fp32", "int8", "truth"))
    numbers = {**compare(fp32, int8, truth, tolerance), "windows": float(windows)}
    failed = tuple(tolerance.failures(numbers))
    return Int8Verdict(not failed, numbers, failed, engine=engine)


def _in_nm(table: Any, pixel_size: np.ndarray) -> Any:
    """``table`` with x and y in nm (``pixel_size``: each row's nm per px)."""
    from decode_mem.io.table import EmitterTable

    cols = dict(table.columns)
    cols["x"] = np.asarray(cols["x"], np.float64) * pixel_size
    cols["y"] = np.asarray(cols["y"], np.float64) * pixel_size
    return EmitterTable(cols)


def verdict_path(folder: Path, precision: str) -> Path:
    """Where the verdict of int8 with its float layers in ``precision`` is kept in ``folder``."""
    return Path(folder) / VERDICT_FILE.format(precision=precision)


def read_verdict(folder: Path | None, precision: str) -> Int8Verdict | None:
    """The verdict kept in ``folder`` (``model.engine.int8_folder``) for ``precision``, or None: none there,
    unreadable, or made with other check settings."""
    if folder is None:
        return None
    try:
        saved = json.loads(verdict_path(folder, precision).read_text())
        if saved.get("check") != CHECK_KEY:
            return None
        return Int8Verdict(bool(saved["passed"]), {k: float(v) for k, v in saved["numbers"].items()},
                           tuple(saved.get("failed", ())), saved["check"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def kept_verdict(net: Any, simulation: dict[str, Any] | None, precision: str) -> Int8Verdict | None:
    """The verdict an earlier run on this machine made for ``net``, ``simulation`` and ``precision``, or None (a
    first run checks: ``int8_verdict``)."""
    from decode_mem.footprint.engines import converted_dir
    from decode_mem.model.engine import int8_folder

    return read_verdict(int8_folder(converted_dir(), net, simulation), precision) if simulation else None


def int8_checked(net: Any, simulation: dict[str, Any], amp: str | None) -> bool:
    """Whether a run with ``amp`` on a CPU finds a verdict kept for ``net`` and ``simulation`` (else its 'auto'
    checks int8 before its first block)."""
    from decode_mem.model.precision import amp_name
    from decode_mem.torch_facts import HOST

    precision = "bf16" if amp_name(amp, HOST) == "bf16" else "fp32"
    return kept_verdict(net, simulation, precision) is not None


def int8_verdict(net: Any, simulation: dict[str, Any], threads: int, streams: int = 1,
                 precision: str = "fp32") -> Int8Verdict:
    """The verdict for ``net`` quantized for ``simulation``, its float layers in ``precision``: read where a run on
    this machine made it, else the int8 engine is loaded as the run would use it (``threads``, ``streams``;
    quantized first where it is not kept yet: ``model.int8``), checked (``check_int8``) and its verdict kept beside
    it. An int8 engine that fails to load is a failed verdict, not kept (tried again next run)."""
    from decode_mem.footprint.engines import converted_dir
    from decode_mem.io.atomic import atomic_output
    from decode_mem.model.engine import QUANTIZED, EngineUnavailable, load_engine

    kept = kept_verdict(net, simulation, precision)
    if kept is not None:
        return kept
    try:
        engine = load_engine(QUANTIZED[0], net, threads, converted_dir(), streams, precision, simulation)
    except EngineUnavailable as e:
        return Int8Verdict(False, {"error": str(e)}, (str(e),))
    verdict = check_int8(net, engine, simulation)
    folder = getattr(engine, "folder", None)
    if folder is not None:
        try:
            with atomic_output(verdict_path(folder, precision)) as tmp:
                tmp.write_text(json.dumps(verdict.as_json(), indent=1))
        except OSError:  # a read-only cache: checked again next run
            pass
    return verdict
