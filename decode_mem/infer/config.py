"""What a batch inference run is asked to do (``InferConfig``) and which stacks that means (``find_stacks``)."""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from decode_mem.config import AMP_CHOICES, check_choice
from decode_mem.errors import ConfigError, StackError
from decode_mem.footprint.request import SizeRequest, missing_runtime
from decode_mem.io.camera import Camera, camera_fields
from decode_mem.io.formats import is_ndtiff
from decode_mem.model.choice import ModelChoice, choose_model
from decode_mem.torch_facts import device_type

FORMATS = ("csv", "picasso", "parquet", "smap", "smlm", "decode")  # io.localizations.WRITTEN
SUFFIXES = {"csv": (".csv",), "picasso": (".hdf5", ".yaml"), "parquet": (".parquet",), "smap": ("_sml.mat",),
            "smlm": (".smlm",), "decode": (".h5",)}
STACK_PATTERNS = ("*.tif", "*.tiff", "*.zarr", "*.npy", "*.nd2", "*.czi", "*.lif", "*.sif")  # what a folder given
# as input contributes, with its subfolders that are NDTiff datasets
FRAMES_PER_TASK = 4096
JOURNAL_SECONDS = 5.0  # a journal part is closed at the first block end this long after the last one: a kill loses
# at most this much work and the block in hand; parts stay few (one per 5 s) on huge stacks of small blocks

Size = int | Literal["auto"]


@dataclass(frozen=True)
class InferConfig:
    """One batch inference run: ``run_inference(InferConfig(inputs=("movies/",), out="locs"))``.

    inputs          files (anything ``open_stack`` reads), folders (their ``STACK_PATTERNS``, NDTiff datasets) or globs
    out             output folder: ``<stem>.csv``/``.hdf5``+``.yaml``/``.parquet``/``_sml.mat``/``.smlm``/``.h5``,
                    ``<stem>.json`` written last
    model           checkpoint path (None: the shipped model for the device, ``model.choice``: the wide one on a
                    GPU where it is shipped; on a CPU the light one where its verdict passes it, else the small one)
    series          the TIFF (or OME-Zarr) series of every input to localize (None: series 0 and the series after
                    it of the same frame size, one movie, as a file grown page by page holds them)
    max_damage      the share of a movie's frames repairs may cover (NaN frames, missing zarr chunks, unreadable
                    frame files; None: ``io.damage.MAX_DAMAGED_SHARE``, 0.05): a movie with more is refused
    formats         any of 'csv' (ThunderSTORM), 'picasso' (HDF5 + YAML), 'parquet', 'smap' (SMAP's _sml.mat),
                    'smlm' (ShareLoc), 'decode' (DECODE's emitter set .h5)
    chunk_size, batch_size, block, amp, device   passed to ``predict_stack`` (chunk_size 'whole': no tiles;
                    'auto' sizes: the fastest that fit
                    ``memory_limit``; ``amp`` 'auto' | 'bf16' | 'fp16' | 'off')
    memory_limit    bytes: host RssAnon on a CPU, device memory on CUDA (None: decode_mem.footprint's modest default)
    compile         torch.compile the network: True, False, or 'auto' (CPU, long stacks; ``predict_stack``)
    streams         blocks computed at once on a CPU, each with a share of the threads (``predict_stack``)
    threshold       final detection threshold (``PostprocessConfig.threshold``; None: its default)
    camera          camera of the data: a preset name ('emccd', 'scmos': its kind) or a camera YAML, whose fields win
                    over what each file's metadata states (``io.metadata``), or a whole ``Camera`` (every field the
                    user's); None: each file's metadata, the camera table for the camera it names, then the model's
                    camera. ``camera_overrides`` (the camera flags) win over all of them
    write_probability_map  also ``<stem>_prob.zarr``: the detection probability of every pixel (float16)
    drift           estimate the stage drift from each stack's localizations (``decode_mem.drift``) and also
                    write ``<stem>_undrift.<ext>`` (corrected), ``<stem>_drift.csv`` and ``<stem>_drift.png``
    link            also link each stack's localizations into molecules (``decode_mem.link``, after ``drift``):
                    ``<stem>_link.<ext>`` and ``<stem>_group.<ext>``
    quality         also estimate each stack's precision and resolution without ground truth
                    (``decode_mem.evaluate.no_truth``: NeNA, FRC) into ``<stem>.json`` and ``report.html`` (also
                    with ``link``); off by default: its memory grows with the localizations of a stack (a dense
                    10x longer stack peaked 3.3 -> 6.1 GB), unlike the localization's
    report          write ``out/report.html`` for the batch (a pipeline writes its own), with every stack's
                    precision and resolution without ground truth (``<stem>_quality.json``/``.png``)
    strict          data outside the model's domain (``infer.domain``) are an error before any output is written
    resume          skip stacks whose ``<stem>.json`` exists; continue the others after the journal a stopped or
                    killed run left in ``<stem>.progress/`` (the same settings, else a ConfigError naming the
                    difference), from the start where there is none
    journal_seconds a part of the journal is closed at the first block end this long after the last (0: after
                    every block): what a kill can lose beside the block in hand
    workers         > 0: a dask.distributed LocalCluster with this many 1-thread processes
    scheduler       address of an existing dask scheduler (instead of ``workers``)
    frames_per_task frames per dask task (rounded up to a multiple of the block length)
    threads         torch CPU threads per process (None: torch's default; the idle cores where torch was
                    imported before decode_mem, ``decode_mem.threads``)
    engine          what computes the network on a CPU: 'torch' (default), 'openvino', 'onnxruntime' (the ``cpu``
                    extra, on ``threads``; OpenVINO in bf16 where amp is bf16 on a CPU with native bf16, else fp32),
                    'openvino-int8' (int8, close to fp32, not equal: ``model.int8``) or 'auto' (the CLI's default:
                    the fastest of torch, the first two and, where its check against fp32 passed for the model,
                    int8, measured here; ``footprint.engines``, ``infer.int8_check``)
    follow          localize one stack while it is still being written (``infer.live``): a TIFF growing page by
                    page, a zarr array growing along time, a Micro-Manager NDTiff dataset or a folder receiving frame
                    files; ends after
                    ``idle_timeout`` seconds without a new byte; ``<stem>.json`` and ``report.html`` are refreshed
                    every ``refresh`` seconds and the localizations so far appear as parts in ``<stem>.live/``
    two_colour      two colour channels in every movie (``infer.colours.TwoColour``: the registration, ratiometric
                    dyes, channel 2's model and camera): run by ``infer.two_colour``; None: one channel
    """

    inputs: tuple[str, ...]
    out: str
    model: str | None = None
    series: int | None = None
    max_damage: float | None = None
    formats: tuple[str, ...] = ("csv",)
    chunk_size: Size | Literal["whole"] = "auto"
    batch_size: Size = "auto"
    block: Size = "auto"
    amp: Literal["auto", "bf16", "fp16", "off"] = "auto"
    memory_limit: int | None = None
    compile: bool | Literal["auto"] = "auto"
    streams: int = 1
    device: str | None = None
    threshold: float | None = None
    camera: Camera | str | None = None
    camera_overrides: Mapping[str, float] = field(default_factory=dict)
    strict: bool = False
    resume: bool = False
    journal_seconds: float = JOURNAL_SECONDS
    workers: int = 0
    scheduler: str | None = None
    frames_per_task: int = FRAMES_PER_TASK
    threads: int | None = None
    engine: str = "torch"
    write_probability_map: bool = False
    drift: bool = False
    link: bool = False
    quality: bool = False
    report: bool = True
    follow: bool = False
    idle_timeout: float = 30.0
    refresh: float = 10.0
    two_colour: Any = None  # infer.colours.TwoColour
    sizes: SizeRequest = field(init=False, repr=False, compare=False)  # the size settings above, as the planner
    # takes them (made once, here; the runner sets ``block`` per stack)

    def __post_init__(self) -> None:
        inputs = (self.inputs,) if isinstance(self.inputs, (str, os.PathLike)) else tuple(self.inputs)
        object.__setattr__(self, "inputs", tuple(str(i) for i in inputs))
        formats = (self.formats,) if isinstance(self.formats, str) else tuple(self.formats)
        object.__setattr__(self, "formats", formats)
        object.__setattr__(self, "camera_overrides", dict(self.camera_overrides))
        if self.camera is not None and not isinstance(self.camera, Camera):
            camera_fields(str(self.camera))  # a preset or a readable camera YAML: a ConfigError before any work
        if not self.inputs:
            raise ConfigError("inputs: give at least one stack, folder or glob")
        if self.max_damage is not None:
            from decode_mem.io.damage import check_share

            try:
                check_share(self.max_damage)  # the readers' one check of a share
            except StackError as e:
                raise ConfigError(str(e)) from e
        if not str(self.out):
            raise ConfigError("out: an output folder is required")
        bad = [f for f in self.formats if f not in FORMATS]
        if bad or not self.formats:
            raise ConfigError(f"formats: {bad or 'none'} given; choose from {', '.join(FORMATS)}")
        if self.workers < 0:
            raise ConfigError(f"workers must be >= 0, got {self.workers}")
        if self.workers and self.scheduler:
            raise ConfigError("give either workers (a local cluster) or scheduler (an existing one), not both")
        if self.frames_per_task < 1:
            raise ConfigError(f"frames_per_task must be >= 1, got {self.frames_per_task}")
        if not self.journal_seconds >= 0:
            raise ConfigError(f"journal_seconds must be >= 0, got {self.journal_seconds}")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"threads must be >= 1, got {self.threads}")
        check_choice("amp", self.amp, AMP_CHOICES)
        if self.memory_limit is not None and self.memory_limit <= 0:
            raise ConfigError(f"memory_limit must be > 0 bytes, got {self.memory_limit}")
        if self.threshold is not None and not 0 <= self.threshold <= 1:
            raise ConfigError(f"threshold is a probability in [0, 1], got {self.threshold}")
        if self.streams < 1:
            raise ConfigError(f"streams must be >= 1, got {self.streams}")
        for name, words in (("chunk_size", ("auto", "whole")), ("batch_size", ("auto",)), ("block", ("auto",))):
            value = getattr(self, name)
            if value in words:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer or {' or '.join(map(repr, words))}, "
                                  f"got {value!r}")
        if self.streams > 1 and (self.write_probability_map or self.compile is True):
            raise ConfigError(f"streams {self.streams}: not with " + ("write_probability_map (written one block at a "
                              "time)" if self.write_probability_map else "compile on (not measured from several "
                              "threads)") + "; use streams 1")
        gone = missing_runtime(self.engine)
        if gone:  # before any work, not once per stack
            raise ConfigError(f"engine {self.engine}: {gone} not installed (pip install -e \".[cpu]\")")
        if self.follow:
            self._check_follow()
            if self.series is not None:
                raise ConfigError("series: a followed file is read page by page as it grows; extract the series "
                                  "into a file of its own, or localize it when it is complete")
            if self.max_damage is not None:
                raise ConfigError("max_damage: a followed file's share of repaired frames is not known until it is "
                                  "complete (repairs are listed in <stem>.json as they are made); localize it "
                                  "with --max_damage when it is complete")
        if self.write_probability_map and self.distributed:
            raise ConfigError("write_probability_map: the probability map is written by one process; "
                              "run without workers/scheduler")
        if self.two_colour is not None:
            self.two_colour.check(self)
        object.__setattr__(self, "sizes", SizeRequest(
            chunk_size=self.chunk_size, batch_size=self.batch_size, block=self.block, amp=self.amp,
            memory_limit=self.memory_limit, streams=self.streams, engine=self.engine))

    def _check_follow(self) -> None:
        if len(self.inputs) != 1:
            raise ConfigError(f"follow: give one stack to follow (a TIFF file, a zarr array, an NDTiff dataset or a "
                              f"folder), got {len(self.inputs)} inputs")
        if self.distributed or self.write_probability_map or self.streams > 1:
            raise ConfigError("follow: one process, one stream and no probability map (its size is set before the "
                              "first frame); run without workers/scheduler, streams and write_probability_map")
        for name in ("idle_timeout", "refresh"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {getattr(self, name)}")

    @property
    def model_choice(self) -> ModelChoice:
        """The model this run uses and why: ``model``, else the shipped one for the device (``model.choice``); not
        the light one for ratiometric dyes, which are told apart by their photon counts."""
        if self.model is not None:
            return choose_model(self.model, "")
        ratiometric = self.two_colour is not None and self.two_colour.dyes is not None
        return choose_model(None, device_type(self.device), light_refused="ratiometric dyes are told apart by their "
                            "photon counts, for which it was not checked" if ratiometric else None)

    @property
    def stack_options(self) -> dict[str, Any]:
        """What every input is opened with: ``open_stack(path, **cfg.stack_options)``."""
        return {"series": self.series, "max_damage": self.max_damage}

    @property
    def model_path(self) -> Path:
        return self.model_choice.path

    @property
    def distributed(self) -> bool:
        return bool(self.workers or self.scheduler)

    def settings(self) -> dict[str, Any]:
        """The settings recorded in each stack's JSON summary."""
        return {**({"series": self.series} if self.series is not None else {}),
                **({"max_damage": self.max_damage} if self.max_damage is not None else {}),
                "formats": list(self.formats), "chunk_size": self.chunk_size, "batch_size": self.batch_size,
                "block": self.block, "amp": self.amp, "memory_limit": self.memory_limit, "compile": self.compile,
                "streams": self.streams, "device": self.device,
                "threshold": self.threshold, "journal_seconds": self.journal_seconds,
                "workers": self.workers, "scheduler": self.scheduler, "frames_per_task": self.frames_per_task,
                "threads": self.threads, "strict": self.strict, "drift": self.drift, "link": self.link,
                "quality": self.quality, **({"engine": self.engine} if self.engine != "torch" else {}),
                **({"follow": True, "idle_timeout": self.idle_timeout, "refresh": self.refresh} if self.follow else {})}


@dataclass(frozen=True)
class Found:
    """The stacks the inputs name (sorted within each input, first occurrence kept) and inputs naming none."""

    stacks: tuple[Path, ...]
    missing: tuple[tuple[str, str], ...]  # (input, reason)


def find_stacks(inputs: tuple[str, ...]) -> Found:
    """Expand files, folders and globs into stack paths; a folder contributes ``STACK_PATTERNS``, or itself when it
    is a folder of frame files (``_frame_folder``)."""
    stacks: list[Path] = []
    missing: list[tuple[str, str]] = []
    for item in inputs:
        path = Path(item)
        if is_ndtiff(path):
            found = [path]  # one movie: a Micro-Manager NDTiff dataset
        elif path.is_dir() and not _is_zarr(path) and _frame_folder(path):
            found = [path]  # one movie of its frame files (open_stack of the folder), as --follow reads it
        elif path.is_dir() and not _is_zarr(path):
            found = sorted({p for pattern in STACK_PATTERNS for p in path.glob(pattern)}
                           | {p for p in path.iterdir() if is_ndtiff(p)})
            if not found:
                missing.append((item, f"folder has no stacks ({', '.join(STACK_PATTERNS)})"))
        elif path.exists():
            found = [path]
        elif glob.has_magic(item):
            found = sorted(Path(p) for p in glob.glob(item))
            if not found:
                missing.append((item, "no file matches this pattern"))
        else:
            found = []
            missing.append((item, "no such file or directory"))
        stacks += found
    unique = list(dict.fromkeys(p.resolve() for p in stacks))
    return Found(tuple(unique), tuple(missing))


def stem_of(path: Path) -> str:
    """Output base name of a stack: ``movie.ome.tif`` -> ``movie``; ``run1.zarr`` -> ``run1``."""
    name = path.name.rstrip("/")
    for suffix in (".ome.tiff", ".ome.tif", ".ome.zarr", ".tiff", ".tif", ".zarr", ".npy", ".nd2", ".czi", ".lif",
                   ".sif"):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def check_stems(stacks: tuple[Path, ...]) -> None:
    """Two stacks with the same stem would overwrite each other's outputs: a ConfigError naming both."""
    seen: dict[str, Path] = {}
    for p in stacks:
        s = stem_of(p)
        if s in seen:
            raise ConfigError(f"{seen[s]} and {p} would both write '{s}.*' into the output folder; "
                              "run them into different --out folders")
        seen[s] = p


def _frame_folder(path: Path) -> bool:
    """A folder of frame files (an image sequence: its first file in name order holds one frame) is one movie; a
    folder of multi-frame stacks is a batch of stacks."""
    from decode_mem.io._folder import frame_file, natural_key
    from decode_mem.io.stack import open_stack

    with os.scandir(path) as entries:
        names = [e.name for e in entries if e.is_file() and frame_file(e.name)]
    if not names:
        return False
    try:
        with open_stack(path / min(names, key=natural_key)) as first:
            return int(first.shape[0]) == 1
    except Exception:  # an unreadable first file: the folder is taken as stacks, each failing on its own
        return False


def _is_zarr(path: Path) -> bool:
    return path.suffix.lower() == ".zarr" or any((path / m).exists() for m in (".zarray", ".zgroup", "zarr.json"))
