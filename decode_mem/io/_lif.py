"""Leica LIF backend (LAS X, SR GSD): readlif reads one plane at a time.

A LIF file is a project of images, each a series (``series=``). An image's dimensions are numbered in its XML
(1 X, 2 Y, 3 Z, 4 T, 5 emission λ, 9 excitation λ, 10 mosaic tile); its channels are interleaved per plane.
readlif reads a cut image as blank planes; here a cut image gives its complete frames where time is its slowest
dimension (a recording stopped early), else it is refused in one line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import StackError, exception_line
from decode_mem.io._layout import Source, entries_text
from decode_mem.io._planes import PlaneArray, crop
from decode_mem.io.damage import Damage
from decode_mem.io.metadata import MovieMetadata, camera_identity, finite_number

LETTERS = {3: "Z", 4: "T", 5: "L", 9: "L", 10: "M"}  # LIF dimension id -> axis letter (L: a λ sweep, M: tiles;
# a sweep of a one-channel image is its channel axis)
TIME = 4


def _open_file(path: Path) -> Any:
    from readlif.reader import LifFile

    try:
        return LifFile(str(path))
    except Exception as e:
        raise StackError(f"{path}: not a readable Leica LIF file ({exception_line(e)})") from e


def open_source(path: Path, series: int | None, channel: int | None = None, z: int | None = None) -> Source:
    """One image of a LIF file, plane by plane through readlif's ``get_plane``."""
    lif = _open_file(path)
    names = [str(im.get("name", f"image {i}")) for i, im in enumerate(lif.image_list)]
    if not names:
        raise StackError(f"{path}: the LIF file holds no image")
    if series is None and len(names) > 1:
        raise StackError(f"{path}: the LIF file holds {len(names)} images; pass series= to pick one "
                         f"({entries_text(names)})")
    pick = series or 0
    if not 0 <= pick < len(names):
        raise StackError(f"{path}: series={series} out of range: the LIF file holds {len(names)} image(s)")
    try:
        image = lif.get_image(pick)
    except Exception as e:
        raise StackError(f"{path}: image {pick} of the LIF file cannot be read ({exception_line(e)})") from e
    if image.display_dims != (1, 2):
        raise StackError(f"{path}: image {pick} is not an X-Y image (its planes span dimensions "
                         f"{image.display_dims}); decode_mem reads X-Y planes")
    bits = int(image.bit_depth[0])
    dtype = np.uint8 if bits == 8 else np.uint16
    dims = [d for d in image.dims_n if d not in (1, 2)]
    loop_shape = [int(image.dims_n[d]) for d in dims]
    letters = [LETTERS.get(d, "?") for d in dims]
    width, height, channels = int(image.dims_n[1]), int(image.dims_n[2]), int(image.channels)
    if channels == 1 and letters.count("L") == 1:  # a spectral sweep of one detector: its λ are the channels
        letters[letters.index("L")] = "C"
    damage: list[Damage] = []
    loop_shape = _complete(path, image, dims, loop_shape, width * height * dtype().itemsize * channels, damage)

    def read_plane(index: tuple[int, ...], ys: slice, xs: slice) -> np.ndarray:
        rest, c = (index[:-1], index[-1]) if channels > 1 else (index, 0)
        plane = image.get_plane(c=c, requested_dims={d: i for d, i in zip(dims, rest, strict=True)})
        return crop(np.asarray(plane, dtype=dtype), ys, xs)

    if channels > 1:
        loop_shape, letters = [*loop_shape, channels], [*letters, "C"]
    array = PlaneArray(loop_shape, (height, width), dtype, read_plane)
    notes = [f"image {pick} ({names[pick]}) of {len(names)}"] if len(names) > 1 else []
    return Source(array, "".join(letters) + "YX", "lif", thread_safe=False, metadata=_metadata(lif, image),
                  damage=damage, notes=notes)


def _complete(path: Path, image: Any, dims: list[int], loop_shape: list[int], plane_bytes: int,
              damage: list[Damage]) -> list[int]:
    """The loop shape with only the frames the file holds whole (time the slowest dimension), else StackError."""
    start, length = (int(v) for v in image.offsets)
    expected = plane_bytes * math.prod(loop_shape)
    held = min(length, path.stat().st_size - start) if length else 0
    if held >= expected:
        return loop_shape
    if not length:
        raise StackError(f"{path}: the pixel data of image {image.name!r} are not in the file (cut by a crash?)")
    if not dims or dims[-1] != TIME:
        raise StackError(f"{path}: image {image.name!r} is cut ({held} of its {expected} bytes are in the file)")
    per_frame = expected // loop_shape[-1]
    frames = max(0, held) // per_frame
    if frames == 0:
        raise StackError(f"{path}: image {image.name!r} is cut before its first complete frame")
    damage.append(Damage(frames, f"the LIF image has {loop_shape[-1]} frames but the file ends after frame "
                                 f"{frames - 1} (cut by a crash?)",
                         f"frames {frames}..{loop_shape[-1] - 1} left out; the stack ends with frame {frames - 1}"))
    return [*loop_shape[:-1], frames]


def read_metadata(path: Path, series: int = 0) -> MovieMetadata:
    """The camera one image of a LIF file records (``docs/formats.md``)."""
    lif = _open_file(Path(path))
    return _metadata(lif, lif.get_image(series))


def _metadata(lif: Any, image: Any) -> MovieMetadata:
    values: dict[str, Any] = {}
    acquisition: dict[str, Any] = {}
    settings: dict[str, str] = {}
    try:
        scale = float(image.scale_n[1])  # pixels per µm
        if math.isfinite(scale) and scale > 0 and 1 <= 1e3 / scale <= 100_000:
            values["pixel_size"] = round(1e3 / scale, 6)
    except Exception:  # no calibration
        pass
    camera = _camera_setting(lif, image)
    if camera is not None:
        em_on = camera.get("CanDoEMGain", "0").strip().lower() in ("1", "true")
        gain = finite_number(camera.get("EMGainValue"))
        if em_on and gain is not None and gain >= 1:
            values["em_gain"] = gain
        acquisition.update(camera_identity(camera.get("CameraName"), camera.get("SerialNumber")))
        for key in ("GainValue", "ReadoutSpeed", "ReadOutRate", "PreAmpGain", "CameraFormat"):
            if camera.get(key):
                settings[key] = camera.get(key)
    found = values or acquisition or settings
    return MovieMetadata("lif" if found else None, values, acquisition, settings)


def _camera_setting(lif: Any, image: Any) -> Any:
    """The image's ``ATLCameraSettingDefinition`` element (camera systems; SR GSD), or None (a confocal): its
    attributes ``CanDoEMGain``, ``EMGainValue``, ``CameraName`` are those SMAP's and Bio-Formats' LIF readers use."""
    for element in lif.xml_root.iter("Element"):
        if element.get("Name") == image.name and element.find("Data/Image") is not None:
            return next(element.iter("ATLCameraSettingDefinition"), None)
    return None
