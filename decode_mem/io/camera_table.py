"""Cameras decode_mem recognises by the model a movie file records, and what each model fixes.

``camera_table.yaml`` (package data) lists common SMLM cameras: the strings files record for each model, its kind
(EMCCD or sCMOS) and the numbers its manufacturer publishes (baseline [ADU], e⁻/ADU, QE, read noise [e⁻ rms]),
each with its source. A number that depends on a camera setting (an EMCCD's pre-amp gain and readout rate, a
Zyla's amplifier gain) is a table keyed by the setting's values, filled only when the file records the setting.
The YAML is read when asked for (``find_camera``, ``load_table``), never at import, and checked as it is read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from decode_mem.config import yaml_problem
from decode_mem.errors import ConfigError

TABLE_FILE = "camera_table.yaml"
FIELDS = ("baseline", "e_per_adu", "qe", "read_noise")  # the Camera fields a model can fix, besides its kind
KINDS = ("emccd", "scmos")
# field -> (low, high, low allowed): what a published number of that field can be
RANGES = {"baseline": (0.0, 65535.0, True), "e_per_adu": (0.0, 100.0, False), "qe": (0.0, 1.0, False),
          "read_noise": (0.0, 1000.0, True), "pixel_um": (0.0, 100.0, False)}
UNITS = {"baseline": "ADU", "e_per_adu": "e⁻/ADU", "qe": "", "read_noise": "e⁻ rms", "pixel_um": "µm"}
LABELS = {"baseline": "baseline [ADU]", "e_per_adu": "e⁻/ADU", "qe": "QE", "read_noise": "read noise [e⁻ rms]",
          "pixel_um": "sensor pixel [µm]"}  # in the docs
ENTRY_KEYS = ("name", "match", "kind", "pixel_um", *FIELDS, "unsourced")
NUMBER_KEYS = ("value", "depends_on", "values", "source", "cite", "note")
DOC_HEADING = "## Cameras decode_mem recognises in a file"
_FREQUENCY = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(mhz|khz|hz)\b", re.IGNORECASE)
_UNIT_HZ = {"hz": 1.0, "khz": 1e3, "mhz": 1e6}


@dataclass(frozen=True)
class TableNumber:
    """One published number of a camera model: a ``value``, or ``values`` keyed by the settings in ``depends_on``
    (nested in that order; a number at a shallower level does not depend on the later settings)."""

    value: float | None
    depends_on: tuple[str, ...]
    values: Mapping[str, Any]
    source: str
    cite: str = ""
    note: str = ""

    def lookup(self, settings: Mapping[str, str], conflicts: Mapping[str, list[str]]) -> tuple[float | None, str]:
        """The number for ``settings`` (canonical setting name -> the file's value), or None and why not."""
        if self.value is not None:
            return self.value, ""
        level: Any = self.values
        for setting in self.depends_on:
            if setting in conflicts:
                return None, f"depends on the {setting}, and the file records several ({', '.join(conflicts[setting])})"
            if setting not in settings:
                return None, f"depends on the {setting}, which the file does not record"
            key = _table_key(level, settings[setting])
            if key is None:
                return None, (f"depends on the {setting}: the camera table has no value for {settings[setting]!r} "
                              f"(it has {', '.join(repr(k) for k in level)})")
            level = level[key]
            if not isinstance(level, Mapping):
                return float(level), ""
        raise AssertionError("a checked table ends in numbers")  # load_table refuses deeper tables

    def describe(self) -> str:
        """The number in words for the docs: '200', or 'by readout rate: 216 MHz → 0.9; 540 MHz → 1.1'."""
        if self.value is not None:
            return _number(self.value)
        return f"by {' and '.join(self.depends_on)}: {_describe_level(self.values)}"


@dataclass(frozen=True)
class CameraEntry:
    """A camera model of the table: ``fields(settings)`` gives the Camera fields it fixes, with their sources."""

    name: str
    match: tuple[str, ...]
    kind: str
    pixel_um: TableNumber | None
    numbers: Mapping[str, TableNumber]
    unsourced: Mapping[str, str]
    setting_names: Mapping[str, tuple[str, ...]]  # canonical setting -> the names files give it

    def fields(self, settings: Mapping[str, str] | None = None) -> tuple[dict[str, float | str], dict[str, str],
                                                                          list[str]]:
        """(the Camera fields this model fills for a file with these ``settings``, the source of each, lines saying
        what it could not fill and why). ``settings``: the camera settings the file records, by the names the file
        gives them ("Pre-Amp-Gain": "Gain 3", "ReadoutMode": "17.000 MHz"); names and values are matched
        forgivingly (case, spaces, a device prefix on the name, "Gain 3" = "3", "17.000 MHz" = "17 MHz")."""
        canonical, conflicts = _canonical_settings(settings or {}, self.setting_names)
        values: dict[str, float | str] = {"kind": self.kind}
        sources = {"kind": f"camera table: {self.name}"}
        notes: list[str] = []
        for name in FIELDS:
            number = self.numbers.get(name)
            if number is None:
                why = self.unsourced.get(name, "")
                notes.append(f"{name}: the camera table has no published value for the {self.name}"
                             + (f" ({why})" if why else ""))
                continue
            value, why = number.lookup(canonical, conflicts)
            if value is None:
                notes.append(f"{name} {why}")
                continue
            values[name] = value
            sources[name] = f"camera table: {self.name} ({number.source})"
        return values, sources, notes


@dataclass(frozen=True)
class CameraTable:
    """The checked contents of a camera table YAML: its entries and the setting names they may depend on."""

    entries: tuple[CameraEntry, ...]
    settings: Mapping[str, tuple[str, ...]]

    def find(self, model: str | None) -> CameraEntry | None:
        """The entry whose match strings, found in ``model``, are longest; None for no match or a tie between
        entries (then the file does not say which camera it is)."""
        if not model or not str(model).strip():
            return None
        text = _model_text(str(model))
        scored = sorted(((max(_score(pattern, text) for pattern in entry.match), i)
                         for i, entry in enumerate(self.entries)), reverse=True)
        best, runner_up = scored[0][0], (scored[1][0] if len(scored) > 1 else 0)
        if best == 0 or best == runner_up:
            return None
        return self.entries[scored[0][1]]


def find_camera(model: str | None, table: CameraTable | None = None) -> CameraEntry | None:
    """The camera table's entry for the model string a file records (``"DU897_BV"``, ``"| iXon Ultra | DU897_BV |
    8172 |"``, ``"C13440-20CU"``), or None when no entry matches. Reads the package's table unless given one."""
    if not model:
        return None
    return (table or load_table()).find(model)


def load_table(path: str | Path | None = None) -> CameraTable:
    """Read and check a camera table YAML (the package's ``camera_table.yaml`` by default). A broken entry is a
    ConfigError naming the file, the entry and the problem."""
    if path is None:
        where = f"decode_mem/io/{TABLE_FILE}"
        text = resources.files("decode_mem.io").joinpath(TABLE_FILE).read_text(encoding="utf-8")
    else:
        where, text = str(path), Path(path).read_text(encoding="utf-8")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML: {yaml_problem(e)}") from e
    if not isinstance(raw, dict) or set(raw) != {"settings", "cameras"}:
        raise ConfigError(f"{where}: expected the two top-level keys 'settings' and 'cameras'")
    settings = _check_settings(raw["settings"], where)
    if not isinstance(raw["cameras"], list) or not raw["cameras"]:
        raise ConfigError(f"{where}: 'cameras' must be a non-empty list of entries")
    entries = tuple(_check_entry(item, i, settings, where) for i, item in enumerate(raw["cameras"]))
    seen_names: set[str] = set()
    seen_patterns: dict[str, str] = {}
    for entry in entries:
        if entry.name in seen_names:
            raise ConfigError(f"{where}: camera {entry.name!r}: the name is used by two entries")
        seen_names.add(entry.name)
        for pattern in entry.match:
            key = " + ".join(_model_text(part) for part in _pattern_parts(pattern))
            if seen_patterns.setdefault(key, entry.name) != entry.name:
                raise ConfigError(f"{where}: camera {entry.name!r}: match string {pattern!r} is also in "
                                  f"{seen_patterns[key]!r}")
    return CameraTable(entries, settings)


def table_markdown(table: CameraTable | None = None) -> str:
    """The docs section listing every camera of the table, what it fills and the sources
    (``python docs/make_cameras.py`` writes it into ``docs/cameras.md``)."""
    table = table or load_table()
    lines = [DOC_HEADING, "",
             "When a movie file records which camera took it (ND2, CZI, LIF, SIF, NDTiff and Micro-Manager files "
             "do), decode_mem looks the model up in this table (`decode_mem/io/camera_table.yaml`) and fills the "
             "camera values the manufacturer publishes for it. A value that depends on a camera setting is filled "
             "only when the file records that setting. What the table does not hold comes from the preset "
             "(`emccd` or `scmos`), and the run says so. Each number links to where it was read.", ""]
    for entry in table.entries:
        said = ", ".join(" with ".join(f"`{part}`" for part in _pattern_parts(m)) for m in entry.match)
        lines.append(f"- **{entry.name}** ({entry.kind}; recognised from {said})")
        given = ([("pixel_um", entry.pixel_um)] if entry.pixel_um else []) + [
            (name, entry.numbers[name]) for name in FIELDS if name in entry.numbers]
        for name, number in given:
            note = f"; {number.note}" if number.note else ""
            link = f"[{number.cite or 'source'}]({number.source})"
            lines.append(f"  - {LABELS[name]}: {number.describe()} ({link}{note})")
        missing = [LABELS[name] for name in FIELDS if name not in entry.numbers]
        if missing:
            lines.append(f"  - from the preset: {', '.join(missing)}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------- checks


def _check_settings(raw: Any, where: str) -> dict[str, tuple[str, ...]]:
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{where}: 'settings' must map each setting to the names files give it")
    out = {}
    for name, aliases in raw.items():
        if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
            raise ConfigError(f"{where}: setting {name!r}: its names must be a list of strings")
        out[str(name)] = (str(name), *aliases)
    return out


def _check_entry(item: Any, index: int, settings: Mapping[str, tuple[str, ...]], where: str) -> CameraEntry:
    label = repr(item.get("name")) if isinstance(item, dict) and item.get("name") else f"#{index + 1}"

    def fail(problem: str) -> ConfigError:
        return ConfigError(f"{where}: camera {label}: {problem}")

    if not isinstance(item, dict):
        raise fail("an entry must be a mapping")
    unknown = sorted(set(item) - set(ENTRY_KEYS))
    if unknown:
        raise fail(f"unknown key {unknown[0]!r}; an entry has {', '.join(ENTRY_KEYS)}")
    if not isinstance(item.get("name"), str) or not item["name"].strip():
        raise fail("'name' must be a non-empty string")
    match = item.get("match")
    if (not isinstance(match, list) or not match
            or not all(isinstance(m, str) and all(_model_text(p) for p in _pattern_parts(m)) for m in match)):
        raise fail("'match' must be a non-empty list of strings a file records for this model")
    if item.get("kind") not in KINDS:
        raise fail(f"'kind' must be one of {', '.join(KINDS)}, got {item.get('kind')!r}")
    numbers = {name: _check_number(item[name], name, settings, fail) for name in FIELDS if name in item}
    pixel = _check_number(item["pixel_um"], "pixel_um", settings, fail) if "pixel_um" in item else None
    if pixel is not None and pixel.value is None:
        raise fail("'pixel_um' is a property of the sensor: one value, not a table")
    unsourced = item.get("unsourced") or {}
    if not isinstance(unsourced, dict) or not all(isinstance(v, str) and v.strip() for v in unsourced.values()):
        raise fail("'unsourced' must map fields to why they have no published value")
    for name in unsourced:
        if name not in FIELDS:
            raise fail(f"'unsourced' names {name!r}, not one of {', '.join(FIELDS)}")
        if name in numbers:
            raise fail(f"{name!r} has a value and is also listed as unsourced")
    silent = [name for name in FIELDS if name not in numbers and name not in unsourced]
    if silent:
        raise fail(f"{silent[0]!r} has neither a sourced value nor a line in 'unsourced' saying why not")
    return CameraEntry(item["name"].strip(), tuple(match), item["kind"], pixel, numbers,
                       {str(k): str(v) for k, v in unsourced.items()}, settings)


def _check_number(raw: Any, name: str, settings: Mapping[str, tuple[str, ...]], fail: Any) -> TableNumber:
    if not isinstance(raw, dict):
        raise fail(f"{name!r} must be a mapping with 'value' (or 'depends_on' and 'values') and 'source'")
    unknown = sorted(set(raw) - set(NUMBER_KEYS))
    if unknown:
        raise fail(f"{name!r}: unknown key {unknown[0]!r}; a number has {', '.join(NUMBER_KEYS)}")
    source = raw.get("source")
    if not isinstance(source, str) or not re.match(r"https?://\S+$", source.strip()):
        raise fail(f"{name!r} has no source URL (every number says where it was published)")
    for key in ("cite", "note"):
        if key in raw and not isinstance(raw[key], str):
            raise fail(f"{name!r}: {key!r} must be text")
    if ("value" in raw) == ("values" in raw or "depends_on" in raw):
        raise fail(f"{name!r} must have either 'value' or both 'depends_on' and 'values'")
    if "value" in raw:
        _check_range(raw["value"], name, fail)
        return TableNumber(float(raw["value"]), (), {}, source.strip(), raw.get("cite", ""), raw.get("note", ""))
    depends_on = raw.get("depends_on")
    if not isinstance(depends_on, list) or not depends_on or not all(d in settings for d in depends_on):
        raise fail(f"{name!r}: 'depends_on' must list settings of the table's 'settings' ({', '.join(settings)})")
    values = raw.get("values")
    _check_level(values, name, tuple(depends_on), fail)
    return TableNumber(None, tuple(depends_on), values, source.strip(), raw.get("cite", ""), raw.get("note", ""))


def _check_level(level: Any, name: str, depends_on: tuple[str, ...], fail: Any) -> None:
    if not isinstance(level, dict) or not level:
        raise fail(f"{name!r}: the values by {depends_on[0]} must be a non-empty mapping")
    for key, value in level.items():
        if not isinstance(key, str) or not key.strip():
            raise fail(f"{name!r}: {depends_on[0]} values are written as text, got {key!r}")
        if isinstance(value, dict):
            if len(depends_on) < 2:
                raise fail(f"{name!r}: {key!r} is a table, but {name!r} depends on nothing after {depends_on[0]}")
            _check_level(value, name, depends_on[1:], fail)
        else:
            _check_range(value, name, fail)


def _check_range(value: Any, name: str, fail: Any) -> None:
    low, high, low_ok = RANGES[name]
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
          and (low <= value if low_ok else low < value) and value <= high)
    if not ok:
        raise fail(f"{name!r} = {value!r} is out of range ({'[' if low_ok else '('}{_number(low)}, "
                   f"{_number(high)}] {UNITS[name]})".rstrip())


# --------------------------------------------------------------------------------------------------- matching


def _model_text(text: str) -> str:
    """A model string as matched: lower case, without spaces, dashes and underscores."""
    return re.sub(r"[\s\-_]+", "", text.lower())


def _pattern_parts(pattern: str) -> list[str]:
    """The parts of a match string, all of which must be in the model ("| iXon Ultra | + DU897")."""
    return pattern.split(" + ")


def _score(pattern: str, text: str) -> int:
    """How much of ``text`` the pattern explains (the length of its parts), 0 unless every part is in ``text``."""
    parts = [_model_text(part) for part in _pattern_parts(pattern)]
    return sum(len(p) for p in parts) if all(p in text for p in parts) else 0


def _setting_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _canonical_settings(settings: Mapping[str, Any], names: Mapping[str, tuple[str, ...]]
                        ) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The file's settings under the table's setting names (a file key may carry a device prefix), and the
    settings the file records more than once with different values."""
    found: dict[str, list[str]] = {}
    for key, value in settings.items():
        if value is None or not str(value).strip():
            continue
        key_text = _setting_key(str(key))
        best = max(((len(_setting_key(alias)), setting) for setting, aliases in names.items() for alias in aliases
                    if key_text.endswith(_setting_key(alias))), default=None)
        if best is not None:
            found.setdefault(best[1], [])
            if not any(_same_setting(str(value), v) for v in found[best[1]]):
                found[best[1]].append(str(value))
    canonical = {setting: values[0] for setting, values in found.items() if len(values) == 1}
    conflicts = {setting: values for setting, values in found.items() if len(values) > 1}
    return canonical, conflicts


def _table_key(level: Mapping[str, Any], value: str) -> str | None:
    """The key of ``level`` that names ``value`` (a key may give spellings as 'a | b')."""
    for key in level:
        if any(_same_setting(value, spelling) for spelling in key.split("|")):
            return key
    return None


def _same_setting(a: str, b: str) -> bool:
    """Whether two spellings of a setting value are the same: '17.000 MHz' = '17 MHz' (and '17 MHz - fastest'),
    'Gain 3' = '3', '16-bit (low noise & high well capacity)' = '16-bit (low noise and high well capacity)'."""
    fa, fb = _FREQUENCY.match(a), _FREQUENCY.match(b)
    if fa and fb:
        hz_a = float(fa.group(1)) * _UNIT_HZ[fa.group(2).lower()]
        hz_b = float(fb.group(1)) * _UNIT_HZ[fb.group(2).lower()]
        return math.isclose(hz_a, hz_b, rel_tol=1e-9)
    ta, tb = _value_text(a), _value_text(b)
    return bool(ta) and (ta == tb or ta.removeprefix("gain") == tb.removeprefix("gain"))


def _value_text(text: str) -> str:
    return re.sub(r"[^a-z0-9.]", "", text.lower().replace("&", " and "))


def _number(x: float) -> str:
    return f"{x:g}"


def _describe_level(level: Mapping[str, Any]) -> str:
    parts = []
    for key, value in level.items():
        shown = key.split("|")[0].strip()
        parts.append(f"{shown} → {_number(value)}" if not isinstance(value, Mapping)
                     else f"{shown} → ({_describe_level(value)})")
    return "; ".join(parts)
