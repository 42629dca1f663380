"""The camera table: every number in range and sourced, real model strings found, setting-keyed numbers filled
only with their setting, broken entries refused by name, the YAML read only when asked, the docs in step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from decode_mem.errors import ConfigError
from decode_mem.io.camera_table import (
    DOC_HEADING,
    FIELDS,
    KINDS,
    RANGES,
    find_camera,
    load_table,
    table_markdown,
)

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "decode_mem" / "io" / "camera_table.yaml"


def _raw_entry(name: str) -> dict:
    """The shipped YAML's entry, read without the module (so the lookups are checked against the file)."""
    return next(e for e in yaml.safe_load(SHIPPED.read_text())["cameras"] if e["name"] == name)


def _leaves(level):
    if isinstance(level, dict):
        for value in level.values():
            yield from _leaves(value)
    else:
        yield level


def test_every_number_is_in_range_for_its_field_and_has_a_source_url() -> None:
    raw = yaml.safe_load(SHIPPED.read_text())["cameras"]
    assert len(raw) == len(load_table().entries) >= 15
    for entry in raw:
        assert entry["kind"] in KINDS, entry["name"]
        for name in (*FIELDS, "pixel_um"):
            if name not in entry:
                continue
            number = entry[name]
            assert number["source"].startswith(("https://", "http://")), (entry["name"], name)
            low, high, low_ok = RANGES[name]
            for value in ([number["value"]] if "value" in number else list(_leaves(number["values"]))):
                assert (low <= value if low_ok else low < value) and value <= high, (entry["name"], name, value)
        # a field without a number says why, so the run can say it too
        for name in FIELDS:
            assert name in entry or entry.get("unsourced", {}).get(name), (entry["name"], name)


@pytest.mark.parametrize(("model", "expected"), [
    ("DU897_BV", "Andor iXon 897 (generation not recorded)"),  # what SIF files and the SDK record for any 897
    ("| iXon Ultra | DU897_BV | 8172 |", "Andor iXon Ultra 897"),  # Micro-Manager's Andor adapter
    ("| iXon | DU897_BV | 1234 |", "Andor iXon 897 (iXon3 or earlier)"),
    ("DU-897U-CS0-#BV", "Andor iXon Ultra 897"),
    ("| iXon Ultra | DU888_BV | 11 |", "Andor iXon Ultra 888"),
    ("DU888_BV", "Andor iXon 888 (generation not recorded)"),
    ("C13440-20CU", "Hamamatsu ORCA-Flash4.0 V3"),
    ("C13440-20C", "Hamamatsu ORCA-Flash4.0 V3"),
    ("C11440-22CU", "Hamamatsu ORCA-Flash4.0 V2"),
    ("C11440-22C", "Hamamatsu ORCA-Flash4.0 (C11440-22C)"),
    ("C14440-20UP", "Hamamatsu ORCA-Fusion"),
    ("Hamamatsu ORCA-Fusion BT", "Hamamatsu ORCA-Fusion BT"),
    ("C15550-20UP", "Hamamatsu ORCA-Quest"),
    ("ZYLA-4.2P-USB3", "Andor Zyla 4.2 PLUS"),
    ("zyla_4.2p cl10", "Andor Zyla 4.2 PLUS"),  # case, spaces and underscores ignored
    ("ZYLA-5.5-CL10", "Andor Zyla 5.5"),
    ("SONA-4BV11", "Andor Sona"),
    ("GS144BSI", "Photometrics Prime 95B"),
    ("EVOLVE- 512", "Photometrics Evolve 512 (Delta)"),
    ("pco.edge 4.2", "PCO pco.edge 4.2"),
])
def test_real_model_strings_find_their_camera(model: str, expected: str) -> None:
    entry = find_camera(model)
    assert entry is not None and entry.name == expected


@pytest.mark.parametrize("model", ["Nikon DS-Qi2", "iXon", "C15440", "", None, "   "])
def test_an_unknown_model_gives_none(model) -> None:
    assert find_camera(model) is None


def test_a_string_naming_two_cameras_equally_gives_none() -> None:
    assert find_camera("DU897_BV DU888_BV") is None


def test_a_setting_keyed_number_is_filled_only_with_its_setting() -> None:
    entry = find_camera("ZYLA-4.2P-USB3")
    raw = _raw_entry(entry.name)
    values, sources, notes = entry.fields({})
    assert "e_per_adu" not in values and "read_noise" not in values
    assert "e_per_adu depends on the amplifier gain, which the file does not record" in notes
    assert values["kind"] == "scmos" and values["qe"] == raw["qe"]["value"]
    assert sources["qe"] == f"camera table: {entry.name} ({raw['qe']['source']})"
    # the manual writes 'and', Micro-Manager '&'; the readout rate with its label, as Micro-Manager lists it
    values, sources, notes = entry.fields({"Andor sCMOS Camera-Sensitivity/DynamicRange":
                                           "16-bit (low noise and high well capacity)",
                                           "PixelReadoutRate": "540 MHz - fastest readout"})
    assert values["e_per_adu"] == raw["e_per_adu"]["values"]["16-bit (low noise & high well capacity)"]
    assert values["read_noise"] == raw["read_noise"]["values"]["540 MHz | 270 MHz"]
    assert sources["e_per_adu"] == f"camera table: {entry.name} ({raw['e_per_adu']['source']})"
    assert not any(n.startswith(("e_per_adu", "read_noise")) for n in notes)
    values, _, notes = entry.fields({"Sensitivity/DynamicRange": "11-bit (high speed)"})
    assert "e_per_adu" not in values
    assert any("no value for '11-bit (high speed)'" in n and "12-bit (low noise)" in n for n in notes)


def test_a_number_keyed_by_two_settings_needs_the_second_only_where_it_differs() -> None:
    entry = find_camera("ZYLA-5.5-CL10")
    table = _raw_entry(entry.name)["e_per_adu"]["values"]
    low_noise = {"Sensitivity/DynamicRange": "12-bit (low noise)"}
    assert "e_per_adu" not in entry.fields(low_noise)[0]
    assert "e_per_adu depends on the shutter mode, which the file does not record" in entry.fields(low_noise)[2]
    assert entry.fields({**low_noise, "ElectronicShutteringMode": "Global"})[0]["e_per_adu"] == \
        table["12-bit (low noise)"]["global | GS"]
    assert entry.fields({**low_noise, "ElectronicShutteringMode": "Rolling"})[0]["e_per_adu"] == \
        table["12-bit (low noise)"]["rolling | RS"]
    assert entry.fields({"Sensitivity/DynamicRange": "12-bit (high well capacity)"})[0]["e_per_adu"] == \
        table["12-bit (high well capacity)"]


def test_an_emccd_read_noise_is_filled_at_the_recorded_readout_rate_only() -> None:
    entry = find_camera("| iXon Ultra | DU897_BV | 8172 |")
    raw = _raw_entry(entry.name)
    values, _, notes = entry.fields({"Andor-ReadoutMode": "10.000 MHz", "Andor-Pre-Amp-Gain": "Gain 3"})
    assert values["read_noise"] == raw["read_noise"]["values"]["10 MHz"]
    assert values["baseline"] == raw["baseline"]["value"] and values["kind"] == "emccd"
    assert any(n.startswith("e_per_adu: the camera table has no published value") for n in notes)
    values, _, notes = entry.fields({"ReadoutMode": "17.000 MHz"})
    assert "read_noise" not in values
    assert any("no value for '17.000 MHz'" in n for n in notes)
    values, _, notes = entry.fields({"ReadoutMode": "10 MHz", "Andor-ReadoutMode": "17 MHz"})
    assert "read_noise" not in values and any("records several" in n for n in notes)


TEST_TABLE = """
settings:
  pre-amp gain: [Pre-Amp-Gain]
  readout rate: [ReadoutMode]
cameras:
  - name: Test EMCCD
    match: ["TEST-1"]
    kind: emccd
    e_per_adu:
      depends_on: [readout rate, pre-amp gain]
      values: {"17 MHz": {"1": 16.0, "3": 4.0}, "1 MHz": {"1": 3.5, "3": 1.0}}
      source: https://example.org/test-sheet
    unsourced: {baseline: test, qe: test, read_noise: test}
"""


def test_setting_values_are_matched_forgivingly(tmp_path: Path) -> None:
    path = tmp_path / "table.yaml"
    path.write_text(TEST_TABLE)
    entry = find_camera("test_1", load_table(path))
    raw = yaml.safe_load(TEST_TABLE)["cameras"][0]["e_per_adu"]["values"]
    for rate, gain, key in [("17.000 MHz", "Gain 3", ("17 MHz", "3")), ("17MHz", "3", ("17 MHz", "3")),
                            ("1000 kHz", "gain 1", ("1 MHz", "1")), ("1.0 MHz", " Gain 1 ", ("1 MHz", "1"))]:
        values, sources, _ = entry.fields({"Camera-ReadoutMode": rate, "pre_amp_gain": gain})
        assert values["e_per_adu"] == raw[key[0]][key[1]], (rate, gain)
        assert sources["e_per_adu"] == "camera table: Test EMCCD (https://example.org/test-sheet)"
    assert "e_per_adu" not in entry.fields({"ReadoutMode": "10 MHz", "Pre-Amp-Gain": "Gain 3"})[0]
    assert "e_per_adu" not in entry.fields({"ReadoutMode": "17 MHz", "Pre-Amp-Gain": "Gain 2"})[0]


@pytest.mark.parametrize(("edit", "message"), [
    (("qe", {"value": 1.5, "source": "https://example.org/a"}), r"camera 'Test EMCCD': 'qe' = 1.5 is out of range"),
    (("qe", {"value": 0.9}), r"camera 'Test EMCCD': 'qe' has no source URL"),
    (("qe", {"value": 0.9, "source": "the manual"}), r"camera 'Test EMCCD': 'qe' has no source URL"),
    (("colour", "blue"), r"camera 'Test EMCCD': unknown key 'colour'"),
    (("kind", "ccd"), r"camera 'Test EMCCD': 'kind' must be one of emccd, scmos"),
    (("match", []), r"camera 'Test EMCCD': 'match' must be a non-empty list"),
    (("read_noise", {"depends_on": ["gain"], "values": {"1": 5}, "source": "https://example.org/a"}),
     r"camera 'Test EMCCD': 'read_noise': 'depends_on' must list settings"),
    (("read_noise", {"depends_on": ["readout rate"], "values": {"1 MHz": {"3": 5}},
                     "source": "https://example.org/a"}), r"'1 MHz' is a table, but 'read_noise' depends on nothing"),
    (("read_noise", {"value": 5, "values": {"1 MHz": 5}, "source": "https://example.org/a"}),
     r"'read_noise' must have either 'value' or both"),
    (("unsourced", {"baseline": "test", "qe": "test"}),
     r"camera 'Test EMCCD': 'read_noise' has neither a sourced value nor a line in 'unsourced'"),
])
def test_a_broken_entry_is_an_error_naming_it(tmp_path: Path, edit, message: str) -> None:
    raw = yaml.safe_load(TEST_TABLE)
    key, value = edit
    raw["cameras"][0][key] = value
    if key == "read_noise":
        raw["cameras"][0]["unsourced"].pop("read_noise")
    path = tmp_path / "table.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=message) as info:
        load_table(path)
    assert str(info.value).startswith(str(path))


def test_two_entries_with_one_name_or_one_match_string_are_refused(tmp_path: Path) -> None:
    raw = yaml.safe_load(TEST_TABLE)
    twin = {**raw["cameras"][0], "match": ["TEST-2"]}
    path = tmp_path / "table.yaml"
    path.write_text(yaml.safe_dump({**raw, "cameras": [raw["cameras"][0], twin]}))
    with pytest.raises(ConfigError, match="camera 'Test EMCCD': the name is used by two entries"):
        load_table(path)
    path.write_text(yaml.safe_dump({**raw, "cameras": [raw["cameras"][0], {**twin, "name": "Other",
                                                                             "match": ["test_1"]}]}))
    with pytest.raises(ConfigError, match="camera 'Other': match string 'test_1' is also in 'Test EMCCD'"):
        load_table(path)


def test_importing_the_module_reads_no_yaml() -> None:
    code = ("import yaml\n"
            "def refuse(*a, **k):\n    raise SystemExit(3)\n"
            "yaml.safe_load = refuse\n"
            "import decode_mem.io.camera_table as t\n"
            "print('imported')\n"
            "t.find_camera('DU897_BV')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.strip() == "imported" and done.returncode == 3, done.stderr


def test_the_docs_list_every_camera_as_the_table_has_it() -> None:
    page = (ROOT / "docs" / "cameras.md").read_text()
    start = page.index(DOC_HEADING)
    end = page.find("\n## ", start + len(DOC_HEADING))
    section = page[start:end if end >= 0 else None]
    assert section == table_markdown(), "docs/cameras.md is behind the camera table: run python docs/make_cameras.py"
    for entry in load_table().entries:
        assert f"**{entry.name}**" in section
