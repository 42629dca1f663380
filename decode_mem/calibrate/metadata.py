"""What a movie file says about its pixel size and camera (OME-TIFF, ImageJ, Micro-Manager), and the camera
that follows from it: explicit flags win over a camera file, which wins over the metadata, which wins over
the defaults of the camera kind. Every value's origin is recorded.

Read: OME ``Pixels/@PhysicalSizeX`` (+ unit), ``Detector/@Type`` (EMCCD -> 'emccd', CMOS -> 'scmos'),
``Detector/@AmplificationGain`` (EM gain), ``@Gain`` of ``DetectorSettings``/``Detector`` as EM gain when the
detector is an EMCCD, their ``@Offset`` as the baseline; ImageJ ``XResolution`` with a length ``unit``;
Micro-Manager ``PixelSizeUm`` and ``*-EMGain``/``*-MultiplierGain`` camera properties. Other metadata
(vendor keys, zarr attributes) are not read.
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
    """Camera fields found in a movie's metadata (``values``: Camera field -> value) and the format they
    came from (``source``: 'ome', 'imagej', 'micromanager' or None when nothing was found)."""

    source: str | None = None
    values: dict[str, Any] = field(default_factory=dict)


def read_metadata(path: str | os.PathLike) -> MovieMetadata:
    """The pixel size and camera settings a TIFF file states; an empty MovieMetadata for other files or
    when nothing usable is found (metadata never make a movie unreadable)."""
    path = Path(path)
    if not path.is_file():
        return MovieMetadata()
    try:
        with open(path, "rb") as fh:
            if fh.read(4) not in (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+"):
                return MovieMetadata()
        import tifffile

        with tifffile.TiffFile(path) as tif:
            for source, reader in (("ome", _ome), ("micromanager", _micromanager), ("imagej", _imagej)):
                values = reader(tif)
                if values:
                    return MovieMetadata(source, values)
    except Exception:  # a file whose metadata tifffile cannot parse: fall back to defaults, the reader reports
        return MovieMetadata()
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


def _positive(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def _ome(tif: Any) -> dict[str, Any]:
    if not tif.is_ome or not tif.ome_metadata:
        return {}
    root = ET.fromstring(tif.ome_metadata)
    elems = {}
    for el in root.iter():
        elems.setdefault(el.tag.rsplit("}", 1)[-1], el)
    out: dict[str, Any] = {}
    pixels = elems.get("Pixels")
    if pixels is not None:
        size = _nm(pixels.get("PhysicalSizeX"), pixels.get("PhysicalSizeXUnit", "µm"))
        if size is not None:
            out["pixel_size"] = size
    detector, settings = elems.get("Detector"), elems.get("DetectorSettings")
    dtype = (detector.get("Type") or "").upper() if detector is not None else ""
    if dtype in ("EMCCD", "CMOS"):
        out["kind"] = "emccd" if dtype == "EMCCD" else "scmos"
    for el in (detector, settings):  # DetectorSettings (per channel) override the Detector's defaults
        if el is None:
            continue
        gain = _positive(el.get("AmplificationGain")) or (_positive(el.get("Gain")) if dtype == "EMCCD" else None)
        if gain is not None:
            out["em_gain"] = gain
        offset = el.get("Offset")
        if offset is not None and _positive(offset) is not None:
            out["baseline"] = float(offset)
    return out


def _imagej(tif: Any) -> dict[str, Any]:
    meta = tif.imagej_metadata or {}
    if not tif.is_imagej:
        return {}
    tag = tif.pages.first.tags.get("XResolution")
    if tag is None:
        return {}
    num, den = tag.value
    if not num or not den:
        return {}
    size = _nm(den / num, str(meta.get("unit", "")))  # XResolution: pixels per unit
    return {"pixel_size": size} if size is not None else {}


def _micromanager(tif: Any) -> dict[str, Any]:
    props: dict[str, Any] = {}
    summary = (tif.micromanager_metadata or {}).get("Summary") if tif.is_micromanager else None
    if isinstance(summary, Mapping):
        props.update(summary)
    tag = tif.pages.first.tags.get("MicroManagerMetadata")
    if tag is not None and isinstance(tag.value, Mapping):
        props.update(tag.value)
    if not props:
        return {}
    out: dict[str, Any] = {}
    size = _nm(props.get("PixelSizeUm", props.get("PixelSize_um")), "um")
    if size is not None:
        out["pixel_size"] = size
    for key, value in props.items():
        name = str(key).rsplit("-", 1)[-1].replace(" ", "").lower()
        if name in ("emgain", "multipliergain") and _positive(value) is not None:
            out["em_gain"] = float(value)
    return out


def resolve_camera(metadata: MovieMetadata | None = None, *, camera_file: Mapping[str, Any] | None = None,
                   flags: Mapping[str, Any] | None = None) -> tuple[Camera, dict[str, str]]:
    """The camera for a movie and where each field came from ('flag', 'camera file', 'metadata (<format>)',
    'default (<kind>)'): flags > camera file > metadata > the preset of the camera kind (``io.camera.with_fields``,
    which also says what ``em_gain`` 1 on an EMCCD means)."""
    metadata = metadata or MovieMetadata()
    layers = [(f"metadata ({metadata.source})", metadata.values), ("camera file", camera_file or {}),
              ("flag", {k: v for k, v in (flags or {}).items() if v is not None})]
    given: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for label, values in layers:
        for key, value in values.items():
            given[key], sources[key] = value, label
    kind = given.get("kind", "emccd")
    camera = with_fields(preset(kind), given)
    for key in camera.to_dict():
        sources.setdefault(key, f"default ({camera.kind})")
    if camera.kind != kind:
        sources["kind"] = "em_gain 1: no EM register"
    return camera, sources


def camera_file_fields(value: str | None) -> dict[str, Any]:
    """The fields a ``--camera`` value sets: a camera YAML (map paths made absolute) or a preset name
    (``io.camera.camera_fields``, the same in every job)."""
    return camera_fields(value)
