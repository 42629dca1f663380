"""What a movie file says about its pixel size and camera, and the camera that follows from it.

A flag wins over a ``--camera`` YAML (or the kind a preset names), which wins over the file's metadata, which
wins over the camera table (``io.camera_table``: the model a file names -> its conversion factors), which wins over
the defaults (the preset of the camera kind, or the model's camera where a job starts from one). Every value's
origin is recorded (``resolve_camera``'s sources), for ``<stem>.json`` and the report.

TIFF metadata read here: OME ``Pixels/@PhysicalSizeX`` (+ unit), ``Detector/@Type`` (EMCCD -> 'emccd', CMOS ->
'scmos'), ``Detector/@AmplificationGain`` (EM gain), ``@Gain`` of ``DetectorSettings``/``Detector`` as EM gain when
the detector is an EMCCD, their ``@Offset`` as the baseline, ``Detector/@Model``/``@SerialNumber``; ImageJ
``XResolution`` with a length ``unit``; Micro-Manager ``PixelSizeUm``, ``*-EMGain``/``*-MultiplierGain`` and the
camera device's properties. The microscope formats (ND2, CZI, LIF, SIF, NDTiff) read theirs as they open
(``docs/formats.md`` lists what each gives); zarr attributes are not read.
"""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decode_mem.io.camera import Camera, camera_fields, preset, with_fields

NM_PER_UNIT = {"nm": 1.0, "nanometer": 1.0, "um": 1e3, "µm": 1e3, "μm": 1e3, "micron": 1e3, "microns": 1e3,
               "micrometer": 1e3, "\\u00b5m": 1e3, "mm": 1e6, "millimeter": 1e6, "cm": 1e7, "m": 1e9,
               "å": 0.1, "angstrom": 0.1}
PIXEL_SIZE_RANGE = (1.0, 100_000.0)  # nm: anything outside is not a physical pixel size (e.g. ImageJ 'pixel')


@dataclass(frozen=True)
class MovieMetadata:
    """What a movie file states about its camera.

    ``values``: Camera fields (pixel_size [nm], em_gain, baseline [ADU], e_per_adu, qe, read_noise, kind);
    ``acquisition``: what is not a Camera field but a user wants to see or the camera table needs (camera_model,
    camera_serial, exposure_ms, frame_interval_ms, binning); ``settings``: the camera's read-out settings as the
    software names them (pre-amp gain, readout rate, gain mode), which the camera table's conversion factors depend
    on; ``source``: the format ('ome', 'imagej', 'micromanager', 'nd2', 'czi', 'lif', 'sif', 'ndtiff'), None when
    nothing was found.
    """

    source: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    acquisition: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.values or self.acquisition or self.settings)

    def as_json(self) -> dict[str, Any]:
        """What ``<stem>.json`` records of it."""
        return {"source": self.source, "values": dict(self.values), "acquisition": dict(self.acquisition),
                "settings": dict(self.settings)}


TIFF_MAGIC = (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+")


def read_metadata(path: str | os.PathLike) -> MovieMetadata:
    """What a movie file states about its pixel size and camera; an empty MovieMetadata where it states nothing,
    for a format without such metadata, or where the metadata cannot be parsed (metadata never make a movie
    unreadable: the reader reports what is wrong with the file itself)."""
    path = Path(path)
    try:
        if path.is_file():
            with open(path, "rb") as fh:
                if fh.read(4) in TIFF_MAGIC:
                    return read_tiff_metadata(path)
        from decode_mem.io.formats import vendor_format

        found = vendor_format(path)
        if found is not None and found.available():
            return found.module().read_metadata(path)
    except Exception:  # a file whose metadata cannot be parsed: fall back to defaults, the reader reports
        return MovieMetadata()
    return MovieMetadata()


def read_tiff_metadata(path: str | os.PathLike) -> MovieMetadata:
    """OME, Micro-Manager or ImageJ metadata of a TIFF file, the first of them that states something."""
    import tifffile

    with tifffile.TiffFile(path) as tif:
        for source, reader in (("ome", _ome), ("micromanager", _micromanager), ("imagej", _imagej)):
            found = reader(tif)
            if found:
                return MovieMetadata(source, *found)
    return MovieMetadata()


def _nm(value: Any, unit: str | None) -> float | None:
    try:
        size = float(value)
    except (TypeError, ValueError):
        return None
    scale = NM_PER_UNIT.get((unit or "").strip().lower())
    if scale is None or not math.isfinite(size):
        return None
    nm = size * scale
    return nm if PIXEL_SIZE_RANGE[0] <= nm <= PIXEL_SIZE_RANGE[1] else None


def finite_number(value: Any) -> float | None:
    """A metadata value as a finite float, or None where it is none (the readers' one parser of numbers)."""
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer beyond any float
        return None
    return v if math.isfinite(v) else None


def _positive(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


Found = tuple[dict[str, Any], dict[str, Any], dict[str, str]]  # values, acquisition, settings


def _ome(tif: Any) -> Found | None:
    if not tif.is_ome or not tif.ome_metadata:
        return None
    root = ET.fromstring(tif.ome_metadata)
    elems = {}
    for el in root.iter():
        elems.setdefault(el.tag.rsplit("}", 1)[-1], el)
    out: dict[str, Any] = {}
    acquisition: dict[str, Any] = {}
    pixels = elems.get("Pixels")
    if pixels is not None:
        size = _nm(pixels.get("PhysicalSizeX"), pixels.get("PhysicalSizeXUnit", "µm"))
        if size is not None:
            out["pixel_size"] = size
        interval = _seconds(pixels.get("TimeIncrement"), pixels.get("TimeIncrementUnit", "s"))
        if interval is not None:
            acquisition["frame_interval_ms"] = round(interval * 1e3, 9)
    detector, settings = elems.get("Detector"), elems.get("DetectorSettings")
    dtype = (detector.get("Type") or "").upper() if detector is not None else ""
    if dtype in ("EMCCD", "CMOS"):
        out["kind"] = "emccd" if dtype == "EMCCD" else "scmos"
    if detector is not None:
        model = " ".join(v for v in (detector.get("Manufacturer"), detector.get("Model")) if v)
        acquisition.update(camera_identity(model, detector.get("SerialNumber")))
    for el in (detector, settings):  # DetectorSettings (per channel) override the Detector's defaults
        if el is None:
            continue
        gain = _positive(el.get("AmplificationGain")) or (_positive(el.get("Gain")) if dtype == "EMCCD" else None)
        if gain is not None:
            out["em_gain"] = gain
        offset = el.get("Offset")
        if offset is not None and _positive(offset) is not None:
            out["baseline"] = float(offset)
    plane = elems.get("Plane")
    exposure = _seconds(plane.get("ExposureTime"), plane.get("ExposureTimeUnit", "s")) if plane is not None else None
    if exposure is not None:
        acquisition["exposure_ms"] = round(exposure * 1e3, 9)
    return (out, acquisition, {}) if out or acquisition else None


def _imagej(tif: Any) -> Found | None:
    meta = tif.imagej_metadata or {}
    if not tif.is_imagej:
        return None
    values, acquisition, settings = bioformats_info(str(meta.get("Info") or ""))
    tag = tif.pages.first.tags.get("XResolution")
    num, den = tag.value if tag is not None else (0, 0)
    size = _nm(den / num, str(meta.get("unit", ""))) if num and den else None  # XResolution: pixels per unit
    if size is not None:
        values["pixel_size"] = size
    return (values, acquisition, settings) if values or acquisition or settings else None


# Bio-Formats' 'key = value' lines in an ImageJ file's Info (a Nikon ND2 exported by Fiji): the camera's keys
INFO_SETTINGS = ("ConversionGain", "ReadoutSpeed", "VerticalShiftSpeed", "PreAmpGain", "ReadoutRate", "SensorMode")


def bioformats_info(info: str) -> Found:
    """The camera in the Info text Bio-Formats writes into an ImageJ TIFF exported from a Nikon ND2 (Fiji): the EM
    gain (``GainMultiplier`` where ``EnableGainMultiplier`` is true), camera name and serial number, exposure,
    binning and read-out settings."""
    keys: dict[str, str] = {}
    for line in info.splitlines():
        key, sep, value = line.partition(" = ")
        if sep and key.strip() and key.strip() not in keys:
            keys[key.strip()] = value.strip()
    values: dict[str, Any] = {}
    acquisition: dict[str, Any] = {}
    gain = _positive(keys.get("GainMultiplier"))
    if gain is not None and gain >= 1 and keys.get("EnableGainMultiplier", "true").lower() == "true":
        values["em_gain"] = gain
    model = keys.get("CameraFamilyName") or keys.get("CameraUserName")
    acquisition.update(camera_identity(model, keys.get("CameraUniqueName") or keys.get("CameraName")))
    exposure = _positive(keys.get("dExposureTime") or keys.get("Exposure"))
    if exposure is not None:
        acquisition["exposure_ms"] = exposure
    if keys.get("dBinningX") and keys.get("dBinningY"):
        acquisition["binning"] = f"{keys['dBinningX']}x{keys['dBinningY']}"
    settings = {k: keys[k] for k in INFO_SETTINGS if keys.get(k)}
    return values, acquisition, settings


def _micromanager(tif: Any) -> Found | None:
    props: dict[str, Any] = {}
    summary = (tif.micromanager_metadata or {}).get("Summary") if tif.is_micromanager else None
    if isinstance(summary, Mapping):
        props.update(summary)
    tag = tif.pages.first.tags.get("MicroManagerMetadata")
    if tag is not None and isinstance(tag.value, Mapping):
        props.update(tag.value)
    found = micromanager_fields(props)
    return found if any(found) else None


MM_MODEL = ("cameraname", "cameramodel", "model", "camera")  # a camera device's property naming its model
MM_SERIAL = ("cameraid", "serialnumber", "serialno", "serial")
SETTING_CHARS = 80  # a camera setting longer than this is not a setting (a description, a list)
# words of the camera properties that are read-out settings (what a conversion factor depends on)
SETTING_WORDS = ("gain", "readout", "amplifier", "speed", "mode", "bitdepth", "sensitivity", "conversion",
                 "digitizer", "pixeltype")


def micromanager_fields(props: Mapping[str, Any]) -> Found:
    """The camera of Micro-Manager metadata (a file's summary and first image's tags, or an NDTiff image's
    metadata): ``PixelSizeUm``, ``Exposure-ms``, ``Interval_ms``, ``Binning``, and the properties of the camera
    device that ``Camera`` names (``<label>-EMGain``, its model, serial number and read-out settings)."""
    out: dict[str, Any] = {}
    acquisition: dict[str, Any] = {}
    settings: dict[str, str] = {}
    size = _nm(props.get("PixelSizeUm", props.get("PixelSize_um")), "um")
    if size is not None:
        out["pixel_size"] = size
    for keys, name in ((("Exposure-ms", "Exposure"), "exposure_ms"), (("Interval_ms",), "frame_interval_ms")):
        value = next((v for v in (_positive(props.get(k)) for k in keys) if v is not None), None)
        if value is not None:
            acquisition[name] = value
    binning = props.get("Binning")
    if binning not in (None, ""):
        acquisition["binning"] = str(binning)
    label = str(props.get("Camera") or props.get("Core-Camera") or "")
    model = serial = None
    for key, value in props.items():
        device, _, prop = str(key).rpartition("-")
        name = prop.replace(" ", "").replace("_", "").lower()
        if name in ("emgain", "multipliergain") and _positive(value) is not None:
            out["em_gain"] = float(value)
        if not label or device != label:
            continue
        if name in MM_MODEL and model is None and value:
            model = str(value)
        elif name in MM_SERIAL and serial is None and value:
            serial = str(value)
        elif isinstance(value, (str, int, float)) and len(str(value)) <= SETTING_CHARS \
                and any(word in name for word in SETTING_WORDS):
            settings[prop] = str(value)
    acquisition.update(camera_identity(model or label or None, serial))
    return out, acquisition, settings


def camera_identity(model: str | None, serial: str | None) -> dict[str, str]:
    """``camera_model`` / ``camera_serial`` where a file names them (stripped, empty ones left out)."""
    found = {"camera_model": (model or "").strip(), "camera_serial": (serial or "").strip()}
    return {k: v for k, v in found.items() if v}


def _seconds(value: Any, unit: str | None) -> float | None:
    """A time in seconds from a value and its unit ('s', 'ms', 'µs', 'ns'); None where either is not understood."""
    scale = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9}.get((unit or "").strip().lower())
    v = _positive(value)
    return None if v is None or scale is None else v * scale


def resolve_camera(metadata: MovieMetadata | None = None, *, camera_file: Mapping[str, Any] | None = None,
                   flags: Mapping[str, Any] | None = None, camera_label: str = "camera file",
                   base: Camera | None = None, base_label: str | None = None) -> tuple[Camera, dict[str, str]]:
    """The camera for a movie and where each field came from: flags ('flag') > ``camera_file`` (the fields of a
    camera YAML, or the kind a preset names; ``camera_label`` says which) > the file's metadata ('file metadata
    (<format>)') > the camera table for the model the file names ('camera table: <camera> (<source>)') > ``base``
    (``base_label``: e.g. the model's camera) or the preset of the camera kind ('default (<kind>)';
    ``io.camera.with_fields`` also says what ``em_gain`` 1 on an EMCCD means). A field the table could not fill
    for a camera the file names says why in its source."""
    from decode_mem.io.camera_table import find_camera

    metadata = metadata or MovieMetadata()
    entry = find_camera(metadata.acquisition.get("camera_model"))
    table_values, table_sources, notes = entry.fields(metadata.settings) if entry else ({}, {}, [])
    table_notes = {line.split(" ", 1)[0].rstrip(":"): line for line in notes}  # each note names its field first
    layers = [(table_sources, table_values), (f"file metadata ({metadata.source})", metadata.values),
              (camera_label, camera_file or {}), ("flag", {k: v for k, v in (flags or {}).items() if v is not None})]
    given: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for label, values in layers:
        for key, value in values.items():
            given[key] = value
            sources[key] = label[key] if isinstance(label, Mapping) else label
    kind = given.get("kind", base.kind if base is not None else "emccd")
    start = base if base is not None and base.kind == kind else preset(kind)
    camera = with_fields(start, given)
    default = base_label if start is base and camera.kind == kind else f"default ({camera.kind})"
    for key in camera.to_dict():
        if key not in sources:
            note = table_notes.get(key)
            sources[key] = f"{default}; {note}" if note else default
    if camera.kind != kind:
        sources["kind"] = "em_gain 1: no EM register"
    return camera, sources


def camera_label(value: str | None) -> str:
    """How a ``--camera`` value is named as a source: 'preset <kind>' or 'camera file <path>'."""
    from decode_mem.io.camera import PRESETS

    if value is None:
        return "camera file"
    return f"preset {value}" if str(value) in PRESETS and not Path(value).is_file() else f"camera file {value}"


@dataclass(frozen=True)
class CameraRequest:
    """What a run was told about the camera before any file is read; ``resolve`` adds what each file states.

    ``given``: the fields of ``--camera`` (a YAML's keys, or the kind a preset names; ``given_label`` says which),
    ``flags``: the camera flags, ``base``: the camera to start from where neither nor the file says (the model's;
    None: the preset of the kind). A whole ``Camera`` given (``from_value``) wins over every file.
    """

    given: dict[str, Any] = field(default_factory=dict)
    given_label: str = "camera file"
    flags: dict[str, Any] = field(default_factory=dict)
    base: Camera | None = None
    base_label: str | None = None

    @classmethod
    def from_value(cls, value: Camera | str | os.PathLike | None, flags: Mapping[str, Any] | None = None, *,
                   base: Camera | None = None, base_label: str | None = None) -> CameraRequest:
        """``value``: a Camera (all its fields are the user's), a preset name or a camera YAML, or None."""
        flags = {k: v for k, v in (flags or {}).items() if v is not None}
        if isinstance(value, Camera):
            return cls(value.to_dict(), "camera given", flags, base, base_label)
        if value is None:
            return cls({}, "camera file", flags, base, base_label)
        return cls(camera_fields(value), camera_label(str(value)), flags, base, base_label)

    def resolve(self, metadata: MovieMetadata | None = None) -> tuple[Camera, dict[str, str]]:
        """The camera of a movie whose file states ``metadata``, and where each field came from."""
        return resolve_camera(metadata, camera_file=self.given, flags=self.flags, camera_label=self.given_label,
                              base=self.base, base_label=self.base_label)


CAMERA_TEXT = (("pixel_size", "pixel {:g} nm"), ("em_gain", "EM gain {:g}"), ("e_per_adu", "{:g} e-/ADU"),
               ("baseline", "baseline {:g} ADU"), ("qe", "QE {:g}"), ("read_noise", "read noise {:g} e-"))


def camera_text(camera: Camera, sources: Mapping[str, str]) -> str:
    """One line: each camera number and, in brackets, where it came from (for the report and the console)."""
    parts = [f"{camera.kind}"] + [f"{fmt.format(getattr(camera, key))} [{sources.get(key, '?').split(';')[0]}]"
                                   for key, fmt in CAMERA_TEXT]
    return ", ".join(parts)


def camera_gaps(metadata: MovieMetadata | None, sources: Mapping[str, str]) -> str | None:
    """Where a file names its camera but neither it nor the camera table gives a conversion factor: one line naming
    the numbers taken from the defaults and why (the table's note), or None. The domain check still judges them."""
    model = (metadata.acquisition.get("camera_model") if metadata else None) or None
    if model is None:
        return None
    gaps = [key for key in ("e_per_adu", "baseline", "em_gain", "read_noise", "qe")
            if not sources.get(key, "").startswith(("flag", "camera", "file metadata", "preset"))]
    if not gaps:
        return None
    default = sources[gaps[0]].split("; ")[0]
    why = any("; " in sources.get(k, "") for k in gaps)
    table = " nor the camera table (why: camera_sources in the run's .json)" if why else ""
    return (f"the file names its camera ({model}) but neither it{table} gives {', '.join(gaps)}: taken from "
            f"{default}; give them as flags or in a camera YAML where known")
