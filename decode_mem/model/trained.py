"""A trained model as inference uses it (``TrainedModel``), and what a repeat run knows of one without loading it.

The first load of a checkpoint by a run on a machine keeps, in ``models.json`` beside the planner's tables
(``io.remembered``), what a run needs of it besides the weights: its metadata, its network's config and receptive
field, and the digest that names the network's converted copies (``engine.network_digest``), keyed by the file's
SHA-256 and the model code. ``remembered_model`` gives the model back with a ``KnownNetwork`` in place of the
network: a run whose network a CPU runtime computes from those copies needs neither torch nor the weights
(``torch_facts``); anything else asked of the network loads it. Models of a spline PSF or of a PSF that changes
across the field are not kept (their runs need torch for the PSF).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from decode_mem.io.camera import Camera
from decode_mem.io.remembered import cache_path, read_table, remember
from decode_mem.model.config import ModelConfig, level_stride

if TYPE_CHECKING:
    from decode_mem.io.psf_file import SplineData
    from decode_mem.model.net import DecodeNet

MODELS_TABLE = "models.json"  # beside the planner's tables


@dataclass(frozen=True)
class TrainedModel:
    """A network with the metadata inference needs: camera (pixel size), simulation settings (PSF), RF,
    and the ``envelope`` of physics it was trained on (``SimulationConfig.envelope``); ``psf``: the spline PSF it
    was trained on (models of a PSF file), else None; ``psf_field``: how that PSF changes across the field (a
    ``io.field_psf_file.FieldPsfData``; ``psf`` is then the PSF at the field's centre), else None. ``net`` is a
    ``DecodeNet``, or a ``KnownNetwork`` standing in for it (``remembered_model``)."""

    net: DecodeNet | KnownNetwork
    camera: Camera
    simulation: dict[str, Any]
    receptive_field: int
    step: int
    path: Path
    envelope: dict[str, Any]
    psf: SplineData | None = None
    psf_field: Any = None

    @property
    def pixel_size(self) -> float:
        return self.camera.pixel_size

    @property
    def config(self) -> ModelConfig:
        return self.net.config


class KnownNetwork:
    """Stands in for a checkpoint's ``DecodeNet`` with what a run kept of it: ``config``, ``downsample_factor``,
    ``receptive_field``, ``assume_receptive_field``, ``level_stride`` and ``digest`` (``engine.network_digest``);
    any other attribute loads the network (``load(path)``, on the CPU) and is the network's."""

    def __init__(self, config: ModelConfig, receptive_field: int, digest: str, path: Path,
                 load: Callable[[Path], DecodeNet]) -> None:
        self.config, self.digest, self.path = config, str(digest), Path(path)
        self._receptive_field = int(receptive_field)
        self._load = load
        self._net: Any = None

    @property
    def downsample_factor(self) -> int:
        return self.config.downsample_factor

    def receptive_field(self) -> int:
        return self._receptive_field

    def assume_receptive_field(self, radius: int) -> None:
        radius = int(radius)
        if radius <= 0:
            raise ValueError(f"a receptive field is a positive radius in px, got {radius}")
        self._receptive_field = radius

    def level_stride(self, height: int, width: int) -> int:
        return level_stride(height, width)

    def loaded(self) -> DecodeNet:
        """The network itself, loaded on first use."""
        if self._net is None:
            import torch

            with torch.inference_mode(False):  # weights of their own, also when first asked inside inference mode
                self._net = self._load(self.path)
            self._net.assume_receptive_field(self._receptive_field)
        return self._net

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("config", "digest", "path"):  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.loaded(), name)


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file (a checkpoint's: what a kept model and a resumed run are keyed by)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def is_network(net: Any) -> bool:
    """Whether ``net`` is a network the planner can trace (a torch module, or a ``KnownNetwork`` standing for one),
    not a duck-typed object that has a network's geometry only; torch is not imported to tell."""
    if isinstance(net, KnownNetwork):
        return True
    torch = sys.modules.get("torch")  # not loaded: no module can have been made
    return torch is not None and isinstance(net, torch.nn.Module)


def real_network(net: Any) -> Any:
    """``net`` itself, or the network a ``KnownNetwork`` stands for (loaded): what a trace or a timing runs."""
    return net.loaded() if isinstance(net, KnownNetwork) else net


def model_code() -> str:
    """A hash of the model code (``decode_mem/model``'s modules, which ``engine.network_digest`` hashes too)."""
    h = hashlib.sha256()
    for src in sorted(Path(__file__).parent.glob("*.py")):
        h.update(src.read_bytes())
    return h.hexdigest()[:20]


def _table() -> Path:
    return cache_path().with_name(MODELS_TABLE)


def _key(sha256: str) -> str:
    return f"{sha256}|code {model_code()}"


def remembered_model(path: Path, sha256: str, load: Callable[[Path], DecodeNet]) -> TrainedModel | None:
    """The model at ``path`` (of SHA-256 ``sha256``) as a run on this machine kept it (``remember_model``), with a
    ``KnownNetwork`` for its network (``load(path)``: the network, where something needs it); None where none was
    kept for this file and model code."""
    entry = read_table(_table()).get(_key(sha256))
    if not isinstance(entry, dict):
        return None
    try:
        net = KnownNetwork(ModelConfig.from_dict(entry["model_config"]), entry["net_receptive_field"],
                           entry["digest"], path, load)
        return TrainedModel(net=net, camera=Camera.from_dict(entry["camera"]), simulation=dict(entry["simulation"]),
                            receptive_field=int(entry["receptive_field"]), step=int(entry["step"]), path=Path(path),
                            envelope=dict(entry["envelope"]))
    except Exception:  # an entry of another version, edited, damaged: the file is loaded instead
        return None


def remember_model(model: TrainedModel, sha256: str) -> None:
    """Keep what ``remembered_model`` needs of ``model`` (loaded from a file of SHA-256 ``sha256``), where it has no
    PSF of its own and its metadata are plain data; written only where it is not kept already."""
    from decode_mem.model.engine import network_digest

    net = model.net
    if model.psf is not None or model.psf_field is not None or net.config.field_shape is not None:
        return
    key = _key(sha256)
    if key in read_table(_table()):
        return
    entry = {"model_config": net.config.to_dict(), "net_receptive_field": int(net.receptive_field()),
             "digest": network_digest(net), "camera": model.camera.to_dict(), "simulation": model.simulation,
             "receptive_field": int(model.receptive_field), "step": int(model.step), "envelope": model.envelope}
    try:
        if json.loads(json.dumps(entry)) != entry:  # tuples, or values JSON changes: not kept (loaded each time)
            return
    except (TypeError, ValueError):
        return
    remember(_table(), {key: entry})
