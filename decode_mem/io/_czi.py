"""Zeiss CZI backend (ZEN, Elyra): Zeiss's libCZI through pylibCZIrw reads one plane (or region of one) at a time.

A CZI file is a set of subblocks placed in a plane by their T, Z, C (and other) indices and their position; libCZI
composes the subblocks that cover a region, so tiles of a mosaic come back as one plane. Scenes are series
(``series=``); channels and z are chosen with ``channel=`` and ``z=``. Before libCZI sees the file, the positions
its header gives (the subblock directory, the metadata) are checked against the file's size: a file cut by a crash
has no directory (ZEN writes it last) and is refused in one line.
"""

from __future__ import annotations

import math
import struct
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import StackError, exception_line
from decode_mem.io._layout import Source, entries_text
from decode_mem.io._planes import PlaneArray
from decode_mem.io.metadata import MovieMetadata, camera_identity, finite_number

DTYPES = {"Gray8": np.uint8, "Gray16": np.uint16, "Gray32Float": np.float32, "Gray32": np.int32}
PLANE_LETTERS = "TZC"  # first, in this order; any other dimension with more than one index follows
HEADER = struct.Struct("<16sqq ii ii 16s16s i qq i q")  # ZISRAWFILE segment: id, allocated, used, then its data
DIRECTORY = struct.Struct("<16sqq i")  # ZISRAWDIRECTORY segment: id, allocated, used, entry count
ENTRY_BYTES = 32  # a directory entry (DV) without its dimension entries
PLANE_FACTOR = 64  # a plane is at most this many times the file's size (compression and sparse tiles aside)


def check_header(path: Path) -> int:
    """The ZISRAWFILE segment's directory and metadata positions lie inside the file, and the directory's count of
    subblocks fits in it; a StackError if not. Returns the number of subblocks."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        raw = fh.read(HEADER.size)
        if len(raw) < HEADER.size:
            raise StackError(f"{path}: a CZI file of {size} bytes, shorter than its own header")
        fields = HEADER.unpack(raw)
        directory, metadata = fields[10], fields[11]
        for name, pos in (("subblock directory", directory), ("metadata", metadata)):
            if not 0 < pos < size:
                raise StackError(f"{path}: the CZI header puts its {name} at byte {pos}, but the file has {size} "
                                 "bytes (a file cut while it was written has no directory: ZEN writes it last)")
        fh.seek(directory)
        raw = fh.read(DIRECTORY.size)
    if len(raw) < DIRECTORY.size or not raw.startswith(b"ZISRAWDIRECTORY"):
        raise StackError(f"{path}: the CZI header's subblock directory (byte {directory}) is not one")
    count = DIRECTORY.unpack(raw)[3]
    if not 0 < count <= (size - directory) // ENTRY_BYTES:
        raise StackError(f"{path}: the CZI's subblock directory counts {count} subblocks; a file of {size} bytes "
                         f"holds at most {(size - directory) // ENTRY_BYTES} there")
    return count


def _open_reader(path: Path) -> Any:
    from pylibCZIrw import czi as pyczi

    subblocks = check_header(path)
    try:
        reader = pyczi.CziReader(str(path))
        box = {k: (int(a), int(n)) for k, (a, n) in reader.total_bounding_box.items()}
    except Exception as e:
        raise StackError(f"{path}: not a readable CZI file ({exception_line(e)})") from e
    planes = math.prod(n for k, (_, n) in box.items() if k not in "XY")
    if any(n < 1 for _, n in box.values()) or planes > subblocks:  # every plane needs a subblock of its own
        reader.close()
        sizes = ", ".join(f"{k} {n}" for k, (_, n) in box.items())
        raise StackError(f"{path}: the CZI's subblocks claim {planes} planes ({sizes}) but its directory lists "
                         f"{subblocks} subblocks: a damaged directory")
    return reader, box


def open_source(path: Path, series: int | None, channel: int | None = None, z: int | None = None) -> Source:
    """The planes of a CZI file (one scene), lazily, region by region through libCZI."""
    reader, box = _open_reader(path)
    try:
        return _source(reader, box, path, series)
    except BaseException:
        reader.close()
        raise


def _source(reader: Any, box: dict[str, tuple[int, int]], path: Path, series: int | None) -> Source:
    try:
        scenes = dict(sorted(reader.scenes_bounding_rectangle.items()))
    except ValueError as e:  # pylibCZIrw: metadata naming more scenes than the subblocks have bounding boxes
        raise StackError(f"{path}: the CZI's scenes cannot be read ({exception_line(e, with_type=False)})") from e
    if len(scenes) > 1 and series is None:
        names = [f"scene {k}" for k in scenes]
        raise StackError(f"{path}: the CZI file holds {len(scenes)} scenes; pass series= to pick one "
                         f"({entries_text(names)})")
    if series is not None and not 0 <= series < max(len(scenes), 1):
        raise StackError(f"{path}: series={series} out of range: the CZI file holds {max(len(scenes), 1)} scene(s)")
    scene = list(scenes)[series or 0] if scenes else None
    rect = scenes[scene] if scenes else reader.total_bounding_rectangle
    x0, y0, width, height = int(rect.x), int(rect.y), int(rect.w), int(rect.h)
    size = path.stat().st_size
    if width < 1 or height < 1 or width * height > PLANE_FACTOR * size:
        raise StackError(f"{path}: the CZI's planes are {width} x {height} px, more than {PLANE_FACTOR} times the "
                         f"file's {size} bytes: a damaged directory (or a sparse mosaic, which decode_mem does not "
                         "read)")
    pixel_types = reader.pixel_types
    kinds = {str(t) for t in pixel_types.values()}
    unknown = kinds - set(DTYPES)
    if unknown or not kinds:
        raise StackError(f"{path}: CZI pixel type {', '.join(sorted(unknown)) or 'none'} is not read by decode_mem "
                         f"(it reads {', '.join(DTYPES)}: one value per pixel)")
    dtype = np.result_type(*(DTYPES[k] for k in kinds))
    letters = [k for k in PLANE_LETTERS if k in box] + [k for k in box if k not in PLANE_LETTERS + "XYSM"
                                                        and box[k][1] > 1]
    loop_shape = [box[k][1] for k in letters]

    def read_plane(index: tuple[int, ...], ys: slice, xs: slice) -> np.ndarray:
        plane = {k: box[k][0] + i for k, i in zip(letters, index, strict=True)}
        roi = (x0 + xs.start, y0 + ys.start, xs.stop - xs.start, ys.stop - ys.start)
        data = reader.read(roi=roi, plane=plane, scene=scene)
        data = np.asarray(data)[..., 0] if np.ndim(data) == 3 else np.asarray(data)
        return data[:: ys.step or 1, :: xs.step or 1].astype(dtype, copy=False)

    array = PlaneArray(loop_shape, (height, width), dtype, read_plane)
    root = _xml(reader)
    channel_names = _channel_names(root, box.get("C", (0, 1))[1])
    return Source(array, "".join(letters) + "YX", "czi", thread_safe=False, close=reader.close,
                  metadata=_metadata(root), names={"C": channel_names} if channel_names else {},
                  notes=[f"scene {series or 0} of {len(scenes)}"] if len(scenes) > 1 else [])


def _xml(reader: Any) -> ET.Element | None:
    try:
        return ET.fromstring(reader.raw_metadata)
    except Exception:  # metadata never make a movie unreadable
        return None


def _channel_names(root: ET.Element | None, n: int) -> list[str]:
    if root is None:
        return []
    names = [c.get("Name") or c.get("Id") or "" for c in root.iterfind(
        "Metadata/Information/Image/Dimensions/Channels/Channel")]
    return names if len(names) == n and all(names) else []


def read_metadata(path: Path) -> MovieMetadata:
    """The camera a CZI file records (``docs/formats.md``)."""
    reader, _ = _open_reader(Path(path))
    try:
        return _metadata(_xml(reader))
    finally:
        reader.close()


def _metadata(root: ET.Element | None) -> MovieMetadata:
    if root is None:
        return MovieMetadata()
    values: dict[str, Any] = {}
    acquisition: dict[str, Any] = {}
    for distance in root.iterfind("Metadata/Scaling/Items/Distance"):
        if distance.get("Id") == "X":
            value = finite_number(distance.findtext("Value"))
            if value is not None and 1e-9 <= value <= 1e-4:  # metres, as ZEN writes it
                values["pixel_size"] = round(value * 1e9, 6)
            elif value is not None and 1e-3 <= value <= 100:  # µm, as pylibCZIrw's write_metadata writes it
                values["pixel_size"] = round(value * 1e3, 6)
    info = root.find("Metadata/Information")
    detector = info.find("Instrument/Detectors/Detector") if info is not None else None
    channel = info.find("Image/Dimensions/Channels/Channel") if info is not None else None
    settings = channel.find("DetectorSettings") if channel is not None else None
    kind = (detector.findtext("Type") or "").strip().upper() if detector is not None else ""
    if kind in ("EMCCD", "CMOS", "SCMOS"):
        values["kind"] = "emccd" if kind == "EMCCD" else "scmos"
    for el in (detector, settings):  # the channel's settings override the detector's defaults
        if el is None:
            continue
        gain = finite_number(el.findtext("EMGain")) or finite_number(el.findtext("AmplificationGain")) \
            or (finite_number(el.findtext("Gain")) if kind == "EMCCD" else None)
        if gain is not None and gain >= 1:
            values["em_gain"] = gain
        offset = finite_number(el.findtext("Offset"))
        if offset is not None and offset > 0:
            values["baseline"] = offset
    if detector is not None:
        model = " ".join(t.strip() for t in (detector.findtext("Manufacturer/Manufacturer"),
                                             detector.findtext("Manufacturer/Model")) if t and t.strip())
        acquisition.update(camera_identity(model, detector.findtext("Manufacturer/SerialNumber")))
    if channel is not None:
        exposure = finite_number(channel.findtext("ExposureTime"))  # ns
        if exposure is not None and exposure > 0:
            acquisition["exposure_ms"] = round(exposure * 1e-6, 9)
    if settings is not None and settings.findtext("Binning"):
        acquisition["binning"] = settings.findtext("Binning").replace(",", "x")
    increment = finite_number(info.findtext("Image/Dimensions/T/Positions/Interval/Increment")) if info is not None \
        else None
    if increment is not None and increment > 0:
        acquisition["frame_interval_ms"] = round(increment * 1e3, 9)
    found = values or acquisition
    return MovieMetadata("czi" if found else None, values, acquisition, {})
