"""Nikon ND2 backend (NIS-Elements, N-STORM): the ``nd2`` library reads one frame (all channels) at a time.

ND2 frames are numbered in acquisition order over the experiment's loops (time, XY positions, z); the loops are the
file's ``sizes`` other than C, Y, X (and S, RGB samples). XY positions are series (``series=``), channels and z
are chosen with ``channel=`` and ``z=``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import StackError, exception_line
from decode_mem.io._layout import Source, entries_text
from decode_mem.io._planes import PlaneArray, crop
from decode_mem.io.metadata import MovieMetadata, camera_identity

PLANE_AXES = ("C", "Y", "X", "S")
SERIES_AXIS = "P"
# 'Key: value' lines of NIS-Elements' camera text (text_info['capturing']) that are read-out settings: what the
# camera table's conversion factors depend on
SETTING_KEYS = ("readout speed", "readout mode", "readout rate", "conversion gain", "pre-amp gain", "preamp gain",
                "scan mode", "sensor mode", "gain mode", "amplifier", "bit depth", "digitizer")
EM_GAIN_KEYS = ("multiplier", "em gain multiplier", "em gain", "emgain")


def _open_file(path: Path) -> Any:
    import nd2

    try:
        f = nd2.ND2File(path)
        sizes = dict(f.sizes)
    except Exception as e:
        raise StackError(f"{path}: not a readable ND2 file ({exception_line(e)})") from e
    if not sizes or any(int(n) < 0 for n in sizes.values()):
        f.close()
        raise StackError(f"{path}: the ND2 file states no image dimensions ({sizes})")
    return f


def open_source(path: Path, series: int | None, channel: int | None = None, z: int | None = None) -> Source:
    """The frames of an ND2 file, lazily, frame by frame through ``nd2.ND2File.read_frame``."""
    f = _open_file(path)
    try:
        return _source(f, path, series)
    except BaseException:
        f.close()
        raise


def _source(f: Any, path: Path, series: int | None) -> Source:
    sizes = {k: int(v) for k, v in f.sizes.items()}
    loops = [k for k in sizes if k not in PLANE_AXES]
    loop_shape = [sizes[k] for k in loops]
    n_series = sizes.get(SERIES_AXIS, 1)
    names = _position_names(f, n_series)
    if series is None and n_series > 1:
        raise StackError(f"{path}: the ND2 file holds {n_series} XY positions; pass series= to pick one "
                         f"({entries_text(names)})")
    pick = series or 0
    if not 0 <= pick < n_series:
        raise StackError(f"{path}: series={series} out of range: the ND2 file holds {n_series} XY position(s)")
    plane_axes = [k for k in sizes if k in ("C", "Y", "X", "S")]
    frame_shape = tuple(sizes[k] for k in plane_axes)
    kept = [k for k in loops if k != SERIES_AXIS]
    lock_free = getattr(f, "read_frame", None)
    if lock_free is None:
        raise StackError(f"{path}: this version of the nd2 library cannot read single frames")

    def read_plane(index: tuple[int, ...], ys: slice, xs: slice) -> np.ndarray:
        full = dict(zip(kept + plane_axes[:-2], index, strict=True))
        full[SERIES_AXIS] = pick
        seq = int(np.ravel_multi_index([full[k] for k in loops], loop_shape)) if loops else 0
        frame = np.asarray(f.read_frame(seq)).reshape(frame_shape)
        extra = tuple(full[k] for k in plane_axes[:-2])
        return crop(frame[extra], ys, xs)

    # the planes are Y, X; C (and S) are loop axes of the array, read from one ND2 frame
    loop_names = kept + plane_axes[:-2]
    if plane_axes[-2:] != ["Y", "X"]:
        raise StackError(f"{path}: ND2 frames of axes {''.join(plane_axes)} are not supported (Y, X last expected)")
    array = PlaneArray([sizes[k] for k in loop_names], (sizes["Y"], sizes["X"]), f.dtype, read_plane)
    channel_names = _channel_names(f)
    return Source(array, "".join(loop_names) + "YX", "nd2", thread_safe=False, close=f.close,
                  metadata=_metadata(f), names={"C": channel_names} if channel_names else {},
                  notes=[f"XY position {pick} ({names[pick]}) of {n_series}"] if n_series > 1 else [])


def _channel_names(f: Any) -> list[str]:
    try:
        return [str(c.channel.name) for c in (f.metadata.channels or [])]
    except Exception:  # legacy files: no structured channel metadata
        return []


def _position_names(f: Any, n: int) -> list[str]:
    try:
        found = [str(p.name or f"position {i}") for i, p in enumerate(f.experiment[0].parameters.points)] \
            if any(loop.type == "XYPosLoop" for loop in f.experiment) else []
    except Exception:
        found = []
    return found if len(found) == n else [f"position {i}" for i in range(n)]


def read_metadata(path: Path) -> MovieMetadata:
    """The camera an ND2 file records (``docs/formats.md``)."""
    f = _open_file(Path(path))
    try:
        return _metadata(f)
    finally:
        f.close()


def _metadata(f: Any) -> MovieMetadata:
    values: dict[str, Any] = {}
    acquisition: dict[str, Any] = {}
    settings: dict[str, str] = {}
    try:
        volume = f.metadata.channels[0].volume
        if volume.axesCalibrated[0]:
            size = float(volume.axesCalibration[0]) * 1e3
            if math.isfinite(size) and 1 <= size <= 100_000:
                values["pixel_size"] = size
    except Exception:  # legacy or partial metadata: no calibration
        pass
    try:
        text = str((f.text_info or {}).get("capturing") or "")
    except Exception:  # no text metadata
        text = ""
    lines = [line.strip() for line in re.split(r"[\r\n]+", text) if line.strip()]
    if lines and ":" not in lines[0].split(",")[0]:  # the first line names the camera: 'Fusion, SN:500651'
        model, _, rest = lines[0].partition(",")
        serial = re.search(r"S/?N\s*:?\s*(\S+)", rest)
        acquisition.update(camera_identity(model, serial.group(1) if serial else None))
    for line in lines:
        key, sep, value = line.partition(":")
        if not sep:
            continue
        name, value = key.strip().lower(), value.strip()
        if name == "exposure":
            ms = _milliseconds(value)
            if ms is not None:
                acquisition["exposure_ms"] = ms
        elif name == "binning":
            acquisition["binning"] = value
        elif name in EM_GAIN_KEYS:
            number = re.match(r"[-+]?\d+(\.\d+)?", value)
            if number and float(number.group()) >= 1:
                values["em_gain"] = float(number.group())
        elif any(name.startswith(k) for k in SETTING_KEYS):
            settings[key.strip()] = value
    try:
        for loop in f.experiment:
            if loop.type in ("TimeLoop", "NETimeLoop"):
                avg = float(loop.parameters.periodDiff.avg)
                if math.isfinite(avg) and avg > 0:
                    acquisition["frame_interval_ms"] = round(avg, 6)
                break
    except Exception:
        pass
    found = values or acquisition or settings
    return MovieMetadata("nd2" if found else None, values, acquisition, settings)


def _milliseconds(text: str) -> float | None:
    m = re.match(r"([-+]?\d+(?:\.\d+)?)\s*(ms|s|us|µs)?", text)
    if not m:
        return None
    scale = {"ms": 1.0, "s": 1e3, "us": 1e-3, "µs": 1e-3, None: 1.0}[m.group(2)]
    v = float(m.group(1)) * scale
    return v if v > 0 else None
