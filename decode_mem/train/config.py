"""TrainConfig: every knob of a training run, one name per knob across YAML key, dataclass field and CLI flag
(a renamed key is still read under its old name: ``RENAMED``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from decode_mem.config import AMP_CHOICES, check_choice, check_keys, check_number, load_yaml, parse_bytes, renamed_keys
from decode_mem.errors import ConfigError
from decode_mem.model.loss import LossConfig
from decode_mem.model.net import ModelConfig
from decode_mem.simulate.config import SimulationConfig
from decode_mem.train.trainable import parse_trainable

NESTED = {"model": ModelConfig, "loss": LossConfig, "simulation": SimulationConfig}


def _whole(value: Any) -> bool:
    """A whole number as a YAML gives it (``250`` or ``250.0``; not a bool, NaN, a string)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and float(value).is_integer()
# old key -> new key: 'chunk_size' became 'crop_size' (in inference chunk_size is the tile core, a different size)
RENAMED = {"chunk_size": "crop_size"}


@dataclass(frozen=True)
class TrainConfig:
    """A training run. Nested sections (model, loss, simulation) are their own typed configs."""

    out: str = "runs/train"
    steps: int = 2000
    batch_size: int = 4  # with accumulation 4: an effective batch of 16 in a quarter of the memory (README)
    accumulation_steps: int = 4
    lr: float = 6e-4
    weight_decay: float = 0.1
    lr_step: int = 500  # StepLR: multiply lr by lr_gamma every lr_step optimizer steps (DECODE-style decay)
    lr_gamma: float = 0.9
    grad_clip: float = 1.0
    max_minutes: float | None = None  # stop (and save) after this much training time; None: run all steps
    lr_decay_to: float | None = None  # with max_minutes: lr falls linearly with the run's training time, to
    # lr_decay_to times its StepLR value at max_minutes (training on a time budget); None: StepLR alone
    init_from: str | None = None  # start from this checkpoint's weights (same model config): fine-tuning
    teacher: str | None = None  # a trained model (same input normalization) whose detections the student also
    # follows: knowledge distillation (model.loss.detection_distillation), e.g. the light model from the small one
    teacher_weight: float = 1.0  # weight of the distillation term in the loss (with teacher)
    trainable: tuple[str, ...] | None = None  # parameter-name patterns that train, the rest frozen (train.trainable)
    size_jitter: int = 3  # px: training frames are frame_size minus 0..size_jitter px per axis (any padding)
    level_jitter: float = 0.5  # std of the noise added to each training frame's level (transform units)
    amp: str = "auto"  # "auto" | "bf16" | "fp16" (with a GradScaler) | "off"; see decode_mem.model.precision
    use_chunking: bool = False  # cut training frames larger than crop_size into crops (gradients accumulated)
    crop_size: int | str = 512  # px, or "auto": the largest crop that fits memory_limit
    memory_limit: int | None = None  # bytes (given as e.g. "2GiB", parsed once): host RssAnon on a CPU, device
    # memory on CUDA (plan)
    memory_tracking: bool = True
    memory_log_file: str | None = None  # default: <out>/memory.csv
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:N"
    num_workers: int = 0
    threads: int | None = None  # torch intra-op threads (None: torch's default); 1 is fastest on a busy machine
    grad_checkpointing: bool = False
    resume: bool = False
    seed: int = 0
    val_every: int = 250
    val_size: int = 64  # validation windows, simulated once with a fixed seed
    log_every: int = 10
    checkpoint_every: int = 250
    quiet: bool = False
    model: ModelConfig = field(default_factory=ModelConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    simulation: SimulationConfig = field(default_factory=SimulationConfig)

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "accumulation_steps", "val_every", "val_size", "log_every",
                     "checkpoint_every", "lr_step"):
            if not _whole(getattr(self, name)) or getattr(self, name) < 1:
                raise ConfigError(f"train.{name} must be an integer >= 1, got {getattr(self, name)!r}")
        if self.threads is not None and (not _whole(self.threads) or self.threads < 1):
            raise ConfigError(f"train.threads must be >= 1 or null, got {self.threads!r}")
        if isinstance(self.size_jitter, bool) or not isinstance(self.size_jitter, int) or self.size_jitter < 0:
            raise ConfigError(f"train.size_jitter must be an integer >= 0 px, got {self.size_jitter!r}")
        if not self.level_jitter >= 0:
            raise ConfigError(f"train.level_jitter must be >= 0, got {self.level_jitter!r}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ConfigError(f"train.max_minutes must be > 0, got {self.max_minutes!r}")
        if self.lr_decay_to is not None:
            if self.max_minutes is None:
                raise ConfigError("train.lr_decay_to decays the learning rate over max_minutes: set max_minutes")
            check_lr_decay_to("train.lr_decay_to", self.lr_decay_to)
        if isinstance(self.teacher_weight, bool) or not isinstance(self.teacher_weight, (int, float)) \
                or not math.isfinite(self.teacher_weight) or self.teacher_weight < 0:
            raise ConfigError(f"train.teacher_weight must be a finite number >= 0, got {self.teacher_weight!r}")
        if self.trainable is not None:
            parse_trainable(self.trainable)  # a malformed pattern: one line now, not after the set-up
            object.__setattr__(self, "trainable", tuple(self.trainable))  # a YAML list compares equal on resume
        if self.lr <= 0:
            raise ConfigError(f"train.lr must be > 0, got {self.lr!r}")
        check_choice("train.amp", self.amp, AMP_CHOICES)
        if self.crop_size != "auto" and (not isinstance(self.crop_size, int) or self.crop_size < 8):
            raise ConfigError(f"train.crop_size must be an integer >= 8 or 'auto', got {self.crop_size!r}")
        given = self.memory_limit
        object.__setattr__(self, "memory_limit", parse_bytes(given))
        if self.memory_limit is not None and not self.memory_limit > 0:
            raise ConfigError(f"train.memory_limit must be > 0 bytes, got {given!r}")

    def notes(self) -> list[str]:
        """Settings that are valid but change nothing, said out loud (the CLI prints them)."""
        notes = []
        if self.use_chunking and self.crop_size != "auto" and max(self.simulation.frame_size) <= self.crop_size:
            h, w = self.simulation.frame_size
            notes.append(f"--use_chunking with crop_size {self.crop_size} changes nothing: the training frames "
                         f"are {h}x{w} px, no larger than one crop")
        if self.teacher is None and self.teacher_weight != TrainConfig.teacher_weight:
            notes.append(f"teacher_weight {self.teacher_weight} changes nothing without a teacher (--teacher)")
        return notes

    @property
    def out_dir(self) -> Path:
        return Path(self.out)

    @property
    def memory_log_path(self) -> Path:
        return Path(self.memory_log_file) if self.memory_log_file else self.out_dir / "memory.csv"

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in NESTED}
        d.update({name: getattr(self, name).to_dict() for name in NESTED})
        return d

    @classmethod
    def from_dict(cls, params: dict[str, Any], *, source: str = "config") -> TrainConfig:
        """Strict: an unknown key is an error that names it and suggests the closest known key; the old names
        of renamed keys (``RENAMED``) are read as the new ones."""
        params = renamed_keys(params or {}, RENAMED, source)
        check_keys(cls, params, source, RENAMED)
        for name, kind in NESTED.items():
            if name in params and not isinstance(params[name], kind):
                params[name] = kind.from_dict(params[name] or {})
        return cls(**params)

    def with_overrides(self, **overrides: Any) -> TrainConfig:
        """A copy with the given top-level fields replaced (``None`` values are ignored)."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


def check_lr_decay_to(where: str, value: object) -> None:
    """ConfigError naming ``where`` unless ``value`` is a number in [0, 1] (``TrainConfig.lr_decay_to``)."""
    check_number(where, value)
    if not 0.0 <= value <= 1.0:  # type: ignore[operator]
        raise ConfigError(f"{where} must be in [0, 1], got {value!r}")


def load_train_config(path: str | Path | None) -> TrainConfig:
    """The only YAML -> TrainConfig path. ``None`` gives the embedded defaults."""
    if path is None:
        return TrainConfig()
    return TrainConfig.from_dict(load_yaml(path, section="train"), source=str(path))

