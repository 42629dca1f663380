"""The one way configs are read: strict keys with a suggestion, and YAML files checked with clear errors."""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from decode_mem.errors import ConfigError

AMP_CHOICES = ("auto", "bf16", "fp16", "off")  # mixed precision everywhere (decode_mem.model.precision)
Z_REFERENCES = ("absolute", "focal_plane")  # what a z is measured from (SimulationConfig / ModelConfig.z_reference)
CONFIG_VERSION = 1  # the `version` key of every decode_mem YAML (optional; a newer version is refused)


def check_keys(known: type | Iterable[str], params: Mapping[str, Any], source: str,
               renamed: Mapping[str, str] | None = None) -> None:
    """Raise ConfigError for the first key of ``params`` not in ``known`` (a dataclass or a list of names).
    ``renamed`` (old key -> new key): a key close to an old name suggests the new one."""
    known = [f.name for f in dataclasses.fields(known)] if isinstance(known, type) else list(known)
    renamed = renamed or {}
    if not isinstance(params, Mapping):
        raise ConfigError(f"{source}: expected a mapping of keys to values, got {type(params).__name__} "
                          f"{str(params)[:60]!r}")
    for key in params:
        if key not in known:
            hint = difflib.get_close_matches(str(key), known + list(renamed), n=1)
            suffix = (f" (did you mean {renamed.get(hint[0], hint[0])!r}?)" if hint
                      else f"; known keys are {sorted(known)}")
            raise ConfigError(f"{source}: unknown key {key!r}{suffix}")


def renamed_keys(params: Mapping[str, Any], renamed: Mapping[str, str], source: str) -> dict[str, Any]:
    """``params`` with keys renamed in a later version (old -> new) read as their new names, so that older YAML
    files keep working; an old and a new spelling of one key together are a ConfigError."""
    out = dict(params)
    for old, new in renamed.items():
        if old in out:
            if new in out:
                raise ConfigError(f"{source}: {old!r} and {new!r} are one setting ({old!r} is its old name); "
                                  f"give {new!r} only")
            out[new] = out.pop(old)
    return out


def check_choice(where: str, value: Any, choices: Iterable[Any]) -> None:
    """ConfigError ``<where> must be one of <choices>, got <value>`` unless ``value`` is one of ``choices``: the
    one shape of every config's choice check (``where``: the key as a user writes it, e.g. ``model.upsample``)."""
    choices = tuple(choices)
    if value not in choices:
        raise ConfigError(f"{where} must be one of {choices}, got {value!r}")


def check_number(where: str, value: Any, *, integer: bool = False, positive: bool = False) -> None:
    """ConfigError naming ``where`` unless ``value`` is a finite number (``integer``: an int; ``positive``: > 0);
    a bool is not a number here (YAML's ``yes`` would otherwise read as 1)."""
    if integer:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where} must be a {'positive ' if positive else ''}finite number, got {value!r}")
    if positive and not value > 0:
        raise ConfigError(f"{where} must be > 0, got {value!r}")


def load_yaml(path: str | os.PathLike, section: str | None = None) -> dict[str, Any]:
    """A YAML file's top-level mapping (or its ``section`` when present); every problem names the file.

    A top-level ``version`` key is checked against ``CONFIG_VERSION`` and removed: files written by a newer
    decode_mem are refused with a clear message instead of being half understood.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        loaded = yaml.safe_load(read_text(path)) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {yaml_problem(e)}") from e
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping of keys to values at the top level")
    version = loaded.pop("version", CONFIG_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= CONFIG_VERSION:
        raise ConfigError(f"{path}: config version {version!r}; this decode_mem reads versions 1..{CONFIG_VERSION}")
    if section is not None and section in loaded:
        loaded = loaded[section] or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: section '{section}' must be a mapping of keys to values")
    return dict(loaded)


def read_text(path: Path) -> str:
    """A text file's UTF-8 text; a ConfigError naming it where it is not text (bytes of a binary file, a file
    another encoding wrote) or cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a text file (byte {e.start} is not UTF-8 text)") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the file ({e.strerror or e})") from None


def yaml_problem(e: Exception) -> str:
    """A YAML parser's error in one line: the problem and where (PyYAML's own message spans several lines and
    quotes the text)."""
    lines = str(e).strip().splitlines()
    problem = getattr(e, "problem", None) or (lines[0] if lines else type(e).__name__)
    mark = getattr(e, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{problem}{where}"


def parse_bytes(text: str | int | float | None) -> int | None:
    """``'2GiB'``, ``'800MiB'``, ``'512M'`` (binary), ``'1.5 GB'`` (decimal) or a number of bytes -> bytes (a memory
    limit as the flags and YAML files give it; None stays None)."""
    if text is None or isinstance(text, (int, float)):
        return None if text is None else int(text)
    if str(text).strip().startswith("-"):
        raise ConfigError(f"memory_limit must be a positive size such as '2GiB', got {text!r}")
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kKmMgGtT]?)(i?)([bB]?)\s*", str(text))
    if not m or m.group(1).count(".") > 1:
        raise ConfigError(f"memory_limit: expected e.g. '2GiB', '800MB' or a number of bytes, got {text!r}")
    power = " KMGT".index(m.group(2).upper() or " ")
    binary = bool(m.group(3)) or not m.group(4)  # 'GiB' and a bare 'G' are binary, 'GB' is decimal
    return int(float(m.group(1)) * (1024 if binary else 1000) ** power)


def resolve_device(name: Any = "auto") -> Any:
    """``"auto"`` (CUDA if present, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a torch.device ->
    torch.device; asking for CUDA where there is none is a ConfigError."""
    import torch  # here, not at import: reading a config needs no torch

    if name is None or name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as e:
        raise ConfigError(f"device: {e}") from e
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {str(device)!r}: CUDA is not available here (use 'cpu' or 'auto')")
    return device


def check_output_folder(path: str | os.PathLike) -> Path:
    """ConfigError (naming the folder) unless ``path`` is a folder this process can write into, or one it can
    create; checked before any work. The check writes a probe file and removes it: nothing is left behind."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"output folder {folder}: is a file, not a folder")
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"output folder {folder}: cannot be made, {existing} is a file")
    try:
        fd, probe = tempfile.mkstemp(prefix=".decode_mem_write_check_", dir=existing)
    except OSError as e:
        where = "there" if existing == folder else f"into {existing}"
        raise ConfigError(f"output folder {folder}: cannot write {where} ({e.strerror or e})") from None
    os.close(fd)
    os.unlink(probe)
    return folder


def check_output_file(path: str | os.PathLike) -> Path:
    """ConfigError unless ``path`` names a file that can be written (not a folder; its folder writable)."""
    file = Path(path)
    if file.is_dir():
        raise ConfigError(f"output file {file}: is a folder, give a file name")
    check_output_folder(file.parent if str(file.parent) else Path("."))
    return file


# a camera pixel in the sample plane, nm: SMLM's 65-160 nm, a 4x objective's 1.6 um; a value 1000x off either end is
# a unit slip (um or pm given as nm), not a camera
PIXEL_NM = (1.0, 20_000.0)


def camera_field_problem(name: str, value: Any) -> str | None:
    """What is wrong with a camera number, in words that follow its name (``camera.<name>`` in a YAML, ``--<name>``
    on a command line), or None. A value off by a factor 1000 from any camera names the unit it was likely given in."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return f"must be a number, got {value!r}"
    if not math.isfinite(v):
        return f"must be a finite number, got {value!r}"
    if name == "baseline":
        return None  # an offset in ADU; a negative one is odd but possible after a background subtraction
    if name == "read_noise":
        return None if v >= 0 else f"must be >= 0 electrons, got {value!r}"
    if v <= 0:
        return f"must be a positive number, got {value!r}"
    if name == "qe" and v > 1:
        hint = f" (a percentage? {v:g} % is {v / 100:g})" if v <= 100 else ""
        return f"is a quantum efficiency in (0, 1], got {value!r}{hint}"
    if name == "pixel_size" and v < PIXEL_NM[0]:
        return (f"is {v:g} nm, smaller than any camera pixel: in µm, as it was probably meant, that is {v * 1e3:g} "
                "nm; give the pixel in nm")
    if name == "pixel_size" and v > PIXEL_NM[1]:
        return (f"is {v:g} nm ({v / 1e3:g} µm), larger than any camera pixel in the sample plane: in pm, as it was "
                f"probably meant, that is {v / 1e3:g} nm; give the pixel in nm")
    return None
