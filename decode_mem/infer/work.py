"""The unit of work, the same in the main process and on a dask worker: frames of one stack -> emitters.

Each process loads a model once (``cached_model``, keyed by path, file version and device) and keeps it for
every later task. ``predict_range`` returns the emitters of one frame range as one table (stack frames,
0-based) together with the process's peak RssAnon while it ran.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from decode_mem.errors import CheckpointError
from decode_mem.footprint.choose import SizeChoice
from decode_mem.footprint.request import SizeRequest
from decode_mem.infer.domain import DomainCheck
from decode_mem.infer.predict import predict_with
from decode_mem.infer.ranges import FrameRange
from decode_mem.io.camera import Camera
from decode_mem.io.table import EmitterTable
from decode_mem.memory import read_host_memory
from decode_mem.model.trained import TrainedModel, file_sha256, remember_model, remembered_model
from decode_mem.postprocess import PostprocessConfig
from decode_mem.tiling import BlockResult
from decode_mem.torch_facts import device_type


@dataclass(frozen=True)
class EngineSettings:
    """Everything a process needs to run the engine; small and picklable (sent with every task)."""

    model: str
    camera: Camera
    sizes: SizeRequest = field(default_factory=lambda: SizeRequest(block=256))  # its block: frames, resolved
    # for the stack (``with_block``)
    compile: bool | str = "auto"
    device: str | None = None
    threshold: float | None = None
    threads: int | None = None

    @property
    def block(self) -> int:
        """Frames per block (the task boundaries of a distributed run are multiples of it)."""
        return int(self.sizes.block)

    def with_block(self, block: int) -> EngineSettings:
        """These settings with blocks of ``block`` frames."""
        return replace(self, sizes=replace(self.sizes, block=block))

    @property
    def postprocess(self) -> PostprocessConfig:
        return PostprocessConfig() if self.threshold is None else PostprocessConfig(threshold=self.threshold)


@dataclass(frozen=True)
class RangeResult:
    """Emitters of frames ``start .. stop-1`` (stack frame numbers) and how the range went."""

    start: int
    stop: int
    table: EmitterTable
    seconds: float
    peak_rss_anon_mb: float | None
    pid: int
    damage: tuple[Any, ...] = ()  # ``io.damage.Damage`` records of the frames the range read (repaired as read)


def cached_model(path: str, device: str | None) -> TrainedModel:
    """The model at ``path``, loaded once per process (reloaded if the file changes). On a CPU, the model as a run on
    this machine kept it where one did (``model.trained``: a ``KnownNetwork`` in place of the network, loaded only
    where torch computes it), else loaded and kept."""
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"{p}: no such checkpoint file")
    return _load(str(p.resolve()), p.stat().st_mtime_ns, device or "cpu")


@functools.lru_cache(maxsize=4)
def _load(path: str, mtime_ns: int, device: str) -> TrainedModel:
    sha = file_sha256(path) if device_type(device) == "cpu" else None
    known = remembered_model(Path(path), sha, _network) if sha else None
    if known is not None:
        return known
    from decode_mem.model.checkpoint import load_model

    model = load_model(path, device=device)
    if sha is None:
        return model
    remember_model(model, sha)
    return model


def _network(path: Path) -> Any:
    """The network of the checkpoint at ``path``, loaded on the CPU with channels-last weights, as ``predict_stack``
    prepares it by default (a ``KnownNetwork``'s, where torch needs it: the planner may time it before)."""
    import torch

    from decode_mem.model.checkpoint import load_model

    return load_model(path).net.to(memory_format=torch.channels_last)


def warm_up(model: str, device: str | None, threads: int) -> int:
    """Run on each dask worker at start: set torch threads, load the model into the cache; returns the pid."""
    import torch

    torch.set_num_threads(threads)
    cached_model(model, device)
    return os.getpid()


def stream_emitters(stack: Any, settings: EngineSettings, on_block: Callable[[BlockResult], None] | None = None,
                    on_plan: Callable[[SizeChoice], None] | None = None,
                    prob_map: Any = None) -> Iterator[EmitterTable]:
    """``predict_stack`` with these settings, one table per block, in frame order."""
    model = cached_model(settings.model, settings.device)
    return predict_with(stack, model, settings.sizes, device=settings.device, postprocess=settings.postprocess,
                        camera=settings.camera, compile=settings.compile, prob_map=prob_map, on_plan=on_plan,
                        on_block=on_block, threads=settings.threads)


def predict_range(stack: Any, start: int, stop: int, settings: EngineSettings) -> RangeResult:
    """Emitters of frames ``start .. stop-1`` of ``stack``, context from the neighbouring real frames."""
    t = time.perf_counter()
    peak: list[float] = []

    def sample(_: BlockResult) -> None:
        anon = read_host_memory().get("rss_anon_mb")
        if anon is not None:
            peak.append(anon)

    tables = list(stream_emitters(FrameRange(stack, start, stop), settings, on_block=sample))
    table = EmitterTable.concat(tables)
    if len(tables) and start:
        table = EmitterTable({**table.columns, "frame": table["frame"] + start})
    damage = getattr(stack, "damage", None)
    return RangeResult(start, stop, table, time.perf_counter() - t, max(peak, default=None), os.getpid(),
                       tuple(damage.records) if damage is not None else ())


@dataclass(frozen=True)
class StackJob:
    """One stack to do: ``index`` orders the jobs of a run; ``shape`` was read when the run was planned; frames
    ``start`` .. ``shape[0] - 1`` are computed."""

    index: int
    path: Path
    stem: str
    shape: tuple[int, int, int]
    dtype: str
    settings: EngineSettings
    domain: DomainCheck = field(default_factory=lambda: DomainCheck(()))
    start: int = 0  # the first frame to compute: a resumed stack's frames before it are in its journal
    key: dict[str, Any] = field(default_factory=dict)  # what its results depend on (``runner.resume_key``)
    camera_sources: dict[str, str] = field(default_factory=dict)  # where each camera field came from
    file_metadata: dict[str, Any] = field(default_factory=dict)  # what the file states (``MovieMetadata.as_json``)
    camera_warning: str | None = None  # the file names its camera but not its conversion (``io.metadata.camera_gaps``)
