"""Pipeline YAML -> typed, validated steps. Every key is checked: an unknown one is a ConfigError naming the
file, the section and the key (with the closest known key as a hint).

Layout (every step optional; see ``pipelines/quickstart.yaml``)::

    out: runs/quickstart          # where everything goes (relative to the working directory; --out overrides)
    seed: 0                       # simulation seed
    threads: null                 # torch CPU threads (null: torch's default)
    device: auto                  # auto | cpu | cuda | cuda:N
    simulate: {frames, stack, gt, block, simulation: {SimulationConfig keys}}
    psf: {beads, z_step, z_start, planes, n_beads, photons, bg, roi, upsample, frame_size, out}   # 3-D: beads -> psf.h5
    train: {TrainConfig keys}     # out defaults to <out>/train; simulation defaults to simulate.simulation
    infer: {model, stack, chunk_size, batch_size, amp, threshold, formats}
    drift: {method, segments, locs_per_segment, render_px, blur}   # decode_mem.drift.DriftConfig keys
    evaluate: {gt, tolerance_lat, tolerance_ax, json}
    render: {pixel, blur, sigma, image, widefield, side_by_side, zoom, depth_image}
    quick: {same sections, merged over the above with --quick}

Paths of *inputs* (``infer.model``, ``infer.stack``, ``evaluate.gt``) are relative to the YAML file's folder;
outputs are relative to ``out``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from decode_mem.config import AMP_CHOICES, check_choice, check_keys, load_yaml
from decode_mem.drift.config import DriftConfig
from decode_mem.errors import ConfigError
from decode_mem.infer.config import FORMATS  # the formats infer writes
from decode_mem.simulate.config import SimulationConfig
from decode_mem.train.config import TrainConfig

SECTIONS = ("simulate", "psf", "train", "infer", "drift", "evaluate", "render")
TOP_KEYS = ("out", "seed", "threads", "device", *SECTIONS, "quick")
BLURS = ("none", "gaussian", "precision")


def _is_count(value: Any) -> bool:
    """Whether ``value`` is an integer >= 1 (a YAML bool is not)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    return dict(value)


def _step(cls: type, value: Any, where: str) -> Any:
    params = _mapping(value, where)
    check_keys(cls, params, where)
    try:
        return cls(**params)
    except TypeError as e:
        raise ConfigError(f"{where}: {e}") from e


@dataclass(frozen=True)
class SimulateStep:
    """Simulate ``frames`` frames to ``<out>/<stack>`` with ground truth ``<out>/<gt>``."""

    frames: int = 200
    stack: str = "stack.tif"
    gt: str = "ground_truth.csv"
    block: int | None = None
    simulation: SimulationConfig = field(default_factory=SimulationConfig)

    def __post_init__(self) -> None:
        if not _is_count(self.frames):
            raise ConfigError(f"simulate.frames must be an integer >= 1, got {self.frames!r}")
        if isinstance(self.simulation, dict):
            object.__setattr__(self, "simulation", SimulationConfig.from_dict(self.simulation,
                                                                              source="simulate.simulation"))


@dataclass(frozen=True)
class PsfStep:
    """Calibrate a spline PSF to ``<out>/<out>`` (``decode_mem.psf``) from bead z-stacks: ``beads`` (input paths),
    or, when null, a stack simulated with the simulate step's PSF and camera: ``n_beads`` beads of ``photons`` over
    ``bg`` photons/px on ``frame_size`` frames, ``planes`` planes ``z_step`` nm apart centred on z = 0 (one
    ``roi`` + 3 px apart, 21 px when null). ``roi``: the beads' regions in px; null (the default) chooses them
    as ``python -m decode_mem.psf`` does. A train step whose simulation says ``psf: spline`` without a
    ``psf_file`` trains on this file."""

    beads: tuple[str, ...] | None = None
    z_step: float = 40.0
    z_start: float | None = None
    planes: int = 41
    n_beads: int = 10
    photons: float = 20000.0
    bg: float = 20.0
    roi: int | None = None
    upsample: int = 2
    frame_size: tuple[int, int] = (96, 128)
    out: str = "psf.h5"

    def __post_init__(self) -> None:
        if self.beads is not None:
            object.__setattr__(self, "beads", (self.beads,) if isinstance(self.beads, str) else tuple(self.beads))
        for key in ("planes", "n_beads"):
            value = getattr(self, key)
            if not _is_count(value):
                raise ConfigError(f"psf.{key} must be an integer >= 1, got {value!r}")
        if not isinstance(self.z_step, (int, float)) or self.z_step == 0:
            raise ConfigError(f"psf.z_step must be a non-zero number of nm, got {self.z_step!r}")
        object.__setattr__(self, "frame_size", tuple(int(v) for v in self.frame_size))


@dataclass(frozen=True)
class InferStep:
    """Chunked inference. ``model``: a checkpoint, or ``shipped`` (the shipped model for the device, as ``infer``
    chooses it: ``model.choice``), or null (the model trained by ``train`` if there is one, else
    the shipped one); ``stack``: the input (null: the simulated
    stack). Localizations go to ``<out>/<stack name>.csv`` (+ ``.hdf5``/``.parquet`` for the formats
    ``picasso``/``parquet``)."""

    model: str | None = None
    stack: str | None = None
    chunk_size: int | str = "auto"
    batch_size: int | str = "auto"
    amp: str = "auto"
    threshold: float | None = None
    formats: tuple[str, ...] = ("csv",)

    def __post_init__(self) -> None:
        for key in ("chunk_size", "batch_size"):
            value = getattr(self, key)
            if value != "auto" and not _is_count(value):
                raise ConfigError(f"infer.{key} must be a positive integer or 'auto', got {value!r}")
        formats = (self.formats,) if isinstance(self.formats, str) else tuple(self.formats)
        bad = [f for f in formats if f not in FORMATS]
        if bad or not formats:
            raise ConfigError(f"infer.formats must be some of {FORMATS}, got {self.formats!r}")
        if "csv" not in formats:
            formats = ("csv", *formats)  # evaluate and render read the CSV
        object.__setattr__(self, "formats", formats)
        check_choice("infer.amp", self.amp, AMP_CHOICES)


@dataclass(frozen=True)
class EvaluateStep:
    """Match the localizations to ground truth (null: the simulated ground truth)."""

    gt: str | None = None
    tolerance_lat: float = 250.0
    tolerance_ax: float = 500.0
    json: str = "metrics.json"


@dataclass(frozen=True)
class RenderStep:
    """Super-resolution image of the localizations (``image``; as ``python -m decode_mem.render`` draws it: ``blur``
    precision, each localization a Gaussian of its own precision; ``pixel`` null: about half the median precision;
    ``sigma``: the narrowest Gaussian, or gaussian's one width), the widefield image (the stack's mean frame,
    ``widefield``) and the two side by side over the same field (``side_by_side``), with a third panel zoomed
    into the densest ``zoom`` × ``zoom`` µm of the super-resolution image (auto: its size from the image; null: no
    zoom panel). A 3-D run (a simulation with z) also gets ``depth_image``: the localizations coloured by z."""

    pixel: float | None = None
    blur: str = "precision"
    sigma: float | None = None
    image: str = "render.png"
    widefield: str = "widefield.png"
    side_by_side: str = "side_by_side.png"
    zoom: float | str | None = "auto"
    depth_image: str = "render_z.png"

    def __post_init__(self) -> None:
        check_choice("render.blur", self.blur, BLURS)
        for key in ("pixel", "sigma"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
                raise ConfigError(f"render.{key} must be > 0 nm or null, got {value!r}")
        if self.zoom is not None and self.zoom != "auto" and (
                isinstance(self.zoom, (bool, str)) or not isinstance(self.zoom, (int, float)) or not self.zoom > 0):
            raise ConfigError(f"render.zoom must be > 0 µm, auto or null, got {self.zoom!r}")


@dataclass(frozen=True)
class PipelineConfig:
    """A parsed pipeline; ``None`` for a step that is not run. ``base`` is the YAML file's folder."""

    out: Path
    seed: int = 0
    threads: int | None = None
    device: str = "auto"
    simulate: SimulateStep | None = None
    psf: PsfStep | None = None
    train: TrainConfig | None = None
    train_deferred: dict[str, Any] | None = None  # train settings that need the psf step's file (see resolve_train)
    infer: InferStep | None = None
    drift: DriftConfig | None = None
    evaluate: EvaluateStep | None = None
    render: RenderStep | None = None
    base: Path = Path(".")
    source: str = "pipeline"

    def input_path(self, value: str) -> Path:
        """An input path from the YAML: absolute, or relative to the YAML file's folder."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.base / p


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` merged in, mappings recursively (neither is modified)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_pipeline(path: str | Path, *, quick: bool = False, out: str | Path | None = None,
                  overrides: dict[str, Any] | None = None) -> PipelineConfig:
    """Read and validate a pipeline YAML. ``quick`` merges its ``quick:`` section over it, then ``overrides``
    (a mapping of the same shape) are merged; ``out`` replaces the top-level ``out``."""
    path = Path(path)
    return pipeline_from_dict(load_yaml(path), source=str(path), base=path.resolve().parent, quick=quick,
                              out=out, overrides=overrides)


def pipeline_from_dict(raw: dict[str, Any], *, source: str = "pipeline", base: Path = Path("."), quick: bool = False,
                       out: str | Path | None = None, overrides: dict[str, Any] | None = None) -> PipelineConfig:
    """Validate a pipeline mapping (see :func:`load_pipeline`); errors name ``source``."""
    check_keys(TOP_KEYS, raw, source)
    quick_part = _mapping(raw.pop("quick", None), f"{source}: quick")
    check_keys(TOP_KEYS[:-1], quick_part, f"{source}: quick")
    if quick:
        raw = deep_merge(raw, quick_part)
    if overrides:
        raw = deep_merge(raw, overrides)
    if out is not None:
        raw["out"] = str(out)
    try:
        return _build(raw, source, base)
    except ConfigError as e:
        msg = str(e)
        raise ConfigError(msg if msg.startswith(source) else f"{source}: {msg}") from e


def _build(raw: dict[str, Any], source: str, base: Path) -> PipelineConfig:
    check_keys(TOP_KEYS, raw, source)
    if not raw.get("out"):
        raise ConfigError("'out' (the output folder) is required")
    out = Path(str(raw["out"])).expanduser()
    seed, threads = raw.get("seed", 0), raw.get("threads")
    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be an integer >= 0, got {seed!r}")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise ConfigError(f"threads must be an integer >= 1 or null, got {threads!r}")
    steps: dict[str, Any] = {}
    simulate = None
    if "simulate" in raw:
        simulate = _step(SimulateStep, raw["simulate"], "simulate")
    psf = _step(PsfStep, raw["psf"], "psf") if "psf" in raw else None
    if psf is not None and psf.beads is None and simulate is None:
        raise ConfigError("psf.beads (bead z-stacks) is required when there is no simulate step to simulate them")
    train, deferred = None, None
    if "train" in raw:
        params = _mapping(raw["train"], "train")
        params.setdefault("out", str(out / "train"))
        if "simulation" not in params:
            if simulate is None:
                raise ConfigError("train needs a 'simulation' section (or a simulate step to copy it from)")
            params["simulation"] = simulate.simulation
        params.setdefault("device", raw.get("device", "auto"))
        if threads is not None:
            params.setdefault("threads", threads)
        sim = params["simulation"]
        wants_psf = isinstance(sim, dict) and sim.get("psf") == "spline" and not sim.get("psf_file")
        if wants_psf and psf is None:
            raise ConfigError("train.simulation: psf 'spline' needs psf_file (or a psf step that makes it)")
        if wants_psf:  # the file is made by the psf step: check every other key now, build after that step
            deferred = {**params, "simulation": {**sim, "psf_file": str(out / psf.out)}}
            TrainConfig.from_dict({**params, "simulation": {**sim, "psf": "astig3d"}}, source="train")
            train = None
        else:
            train = TrainConfig.from_dict(params, source="train")
    for name, cls in (("infer", InferStep), ("drift", DriftConfig), ("evaluate", EvaluateStep), ("render", RenderStep)):
        if name in raw:
            steps[name] = _step(cls, raw[name], name)
    if "evaluate" in steps and steps["evaluate"].gt is None and simulate is None:
        raise ConfigError("evaluate.gt is required when there is no simulate step")
    if "infer" in steps and steps["infer"].stack is None and simulate is None:
        raise ConfigError("infer.stack is required when there is no simulate step")
    if ("evaluate" in steps or "render" in steps or "drift" in steps) and "infer" not in steps:
        raise ConfigError("drift, evaluate and render need an infer step")
    return PipelineConfig(out=out, seed=seed, threads=threads, device=str(raw.get("device", "auto")),
                          simulate=simulate, psf=psf, train=train, train_deferred=deferred, base=base, source=source,
                          **steps)


def resolve_train(config: PipelineConfig) -> PipelineConfig:
    """The config with its deferred train step built (after the psf step wrote the PSF file it trains on)."""
    if config.train_deferred is None:
        return config
    try:
        train = TrainConfig.from_dict(dict(config.train_deferred), source="train")
    except ConfigError as e:
        raise ConfigError(f"{config.source}: {e}") from e
    return replace(config, train=train, train_deferred=None)


def default_model(config: PipelineConfig, device_type: str = "cpu") -> Path:
    """The model the infer step uses: ``infer.model``, else the trained one, else the shipped one for the device
    (``model.choice``: the wide model on a GPU where it is shipped, the small one otherwise) — as ``infer``
    without ``--model`` chooses."""
    from decode_mem.model.choice import choose_model

    assert config.infer is not None
    if config.infer.model is not None and config.infer.model != "shipped":
        return config.input_path(config.infer.model)
    if config.infer.model is None and config.train is not None:
        return config.train.out_dir / "model.pt"
    if config.infer.model is None and config.train_deferred is not None:
        return Path(str(config.train_deferred["out"])) / "model.pt"
    return choose_model(None, device_type).path
