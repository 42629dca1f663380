"""What ``fit`` is asked to do: movies, the camera, the output folder, the time budget and the training policy."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decode_mem.config import check_choice
from decode_mem.errors import ConfigError
from decode_mem.io.camera import Camera

TRAIN_POLICIES = ("auto", "always", "never")


@dataclass(frozen=True)
class FitConfig:
    """One ``fit`` run (``python -m decode_mem.fit``).

    movies          stacks of one setup (same camera and optics); the first is calibrated
    out             output folder: calib.yaml/.png, localizations, fit.json; after fine-tuning the validation's
                    winner as model.pt + model.md (the fine-tuned weights in training/fine_tuned.pt either way)
    camera          the camera that recorded them (None: from the first movie's metadata, else the defaults)
    budget_minutes  wall-clock minutes for the whole command when it trains (fine-tuning or a 3-D model):
                    training gets what the other stages leave (``decode_mem.fit.budget``)
    train           'auto' (train when the base model's envelope does not cover the movie), 'always', 'never'
    base_model      the model to use or fine-tune (None: the shipped generalist for the device, ``model.choice``)
    psf             a PSF file (``python -m decode_mem.psf``): train a 3-D model from scratch on simulations
                    rendered with it, over its valid z range (the shipped model is 2-D)
    lr_decay_to     training (fine-tuning or 3-D): the learning rate at the end of the budget relative to its
                    start, falling linearly with the time trained (``train.lr_decay_to``); None: as it was
    calib_frames    frames the calibration reads; val_windows: held-out matched windows for validation
    train_steps     3-D training (``psf``): this many steps whatever the time they take, instead of the budget's
                    time (a benchmark's fixed amount of training; a stopped run continues from its checkpoint; not
                    with ``lr_decay_to``, which decays over that time); None: budget
    device, threads, seed, formats, chunk_size, batch_size, memory_limit   as for training and inference
    """

    movies: tuple[str, ...]
    out: str
    camera: Camera | None = None
    budget_minutes: float = 15.0
    train: str = "auto"
    base_model: str | None = None
    psf: str | None = None
    lr_decay_to: float | None = None
    calib_frames: int = 200
    val_windows: int = 256
    train_steps: int | None = None
    device: str = "auto"
    threads: int | None = None
    seed: int = 0
    formats: tuple[str, ...] = ("csv",)
    chunk_size: int | str = "auto"
    batch_size: int | str = "auto"
    memory_limit: int | None = None

    def __post_init__(self) -> None:
        movies = (self.movies,) if isinstance(self.movies, (str, os.PathLike)) else tuple(self.movies)
        object.__setattr__(self, "movies", tuple(str(m) for m in movies))
        if not self.movies:
            raise ConfigError("fit: give at least one movie")
        check_choice("fit.train", self.train, TRAIN_POLICIES)
        if not self.budget_minutes > 0:
            raise ConfigError(f"fit: budget_minutes must be > 0, got {self.budget_minutes!r}")
        if self.train_steps is not None and self.psf is None:
            raise ConfigError("fit: train_steps fixes the training of a 3-D model from a PSF file (psf); fine-tuning "
                              "trains for the budget's time")
        if self.train_steps is not None and self.lr_decay_to is not None:
            raise ConfigError("fit: lr_decay_to decays the learning rate over the budget's time; with train_steps "
                              "there is none: give one of them")
        if self.psf is not None:
            from decode_mem.io.psf_file import psf_header

            psf_header(self.psf)  # a missing or foreign file fails here, before any work
            if self.train == "never":
                raise ConfigError("fit: --psf trains a 3-D model (there is no shipped one); drop --train never")
        if self.lr_decay_to is not None:
            from decode_mem.train.config import check_lr_decay_to

            check_lr_decay_to("fit: lr_decay_to", self.lr_decay_to)
        if self.train_steps is not None and (isinstance(self.train_steps, bool) or not isinstance(self.train_steps, int)
                                             or self.train_steps < 1):
            raise ConfigError(f"fit: train_steps must be a positive integer or None, got {self.train_steps!r}")
        if self.calib_frames < 1 or self.val_windows < 1:
            raise ConfigError("fit: calib_frames and val_windows must be >= 1")
        self.infer_config()  # the localization's settings are checked now, not after the training

    def infer_config(self, model: str | None = None, camera: Camera | None = None) -> Any:  # -> InferConfig
        """The ``InferConfig`` of the last stage (localizing every movie into ``out`` with ``model``)."""
        from decode_mem.infer.config import InferConfig

        return InferConfig(inputs=self.movies, out=str(self.out), model=model, camera=camera, formats=self.formats,
                           chunk_size=self.chunk_size, batch_size=self.batch_size, memory_limit=self.memory_limit,
                           device=self.device, threads=self.threads)

    @property
    def out_dir(self) -> Path:
        return Path(self.out)
