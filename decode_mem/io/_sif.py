"""Andor SIF (Solis) backend: sif_parser reads the header, the frames are a read-only memmap of the file.

A SIF file is a text header followed by the frames as little-endian float32 counts, one after the other. The header
is parsed by sif_parser through a guard (``BoundedFile``) that turns a read past the end of the file into an error:
the parser loops until it finds a word's end, which a cut or damaged header never gives. Frames the header counts
but the file does not hold in full (a file cut by a crash) are left out with a damage record, as for a cut TIFF.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import EmptyStackError, StackError, exception_line
from decode_mem.io._layout import Source
from decode_mem.io.damage import Damage
from decode_mem.io.metadata import MovieMetadata, camera_identity, finite_number

LINE_LIMIT = 1 << 20  # a header line longer than this is no header line (binary data read as text)


class BoundedFile(io.RawIOBase):
    """A read-only file whose reads stop at its end with an error, and whose lines are at most ``LINE_LIMIT``."""

    def __init__(self, path: Path) -> None:
        self._fh = open(path, "rb")  # noqa: SIM115 (closed by close())
        self.size = os.fstat(self._fh.fileno()).st_size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        left = self.size - self._fh.tell()
        if n != 0 and left <= 0:
            raise EOFError("the header ends before the end of the file's header fields")
        return self._fh.read(left if n is None or n < 0 else min(n, left))

    def readline(self, limit: int = -1) -> bytes:
        line = self._fh.readline(LINE_LIMIT if limit is None or limit < 0 else min(limit, LINE_LIMIT))
        if len(line) >= LINE_LIMIT:
            raise EOFError(f"a header line longer than {LINE_LIMIT} bytes")
        return line

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._fh.seek(offset, whence)

    def tell(self) -> int:
        return self._fh.tell()

    def close(self) -> None:
        self._fh.close()
        super().close()


def _header(path: Path) -> tuple[tuple[int, int], int, dict[str, Any], int]:
    """(width, height), frames the header counts, the header's fields, the file's size; StackError if unreadable."""
    from sif_parser._sif_open import _open  # the header parser np_open uses; np_open itself cannot map a cut file

    fh = BoundedFile(path)
    try:
        _tile, size, n_frames, info = _open(fh)
    except Exception as e:
        raise StackError(f"{path}: not a readable Andor SIF file ({exception_line(e)})") from e
    finally:
        fh.close()
    width, height = (int(v) for v in size)
    if width <= 0 or height <= 0 or n_frames < 0:
        raise StackError(f"{path}: the SIF header gives frames of {width} x {height} px and {n_frames} frames")
    return (width, height), int(n_frames), info, fh.size


def open_source(path: Path, series: int | None, channel: int | None = None, z: int | None = None) -> Source:
    """The frames of a SIF file as a ``(T, H, W)`` float32 memmap (SIF stores counts as 32-bit floats)."""
    if series:
        raise StackError(f"{path}: series={series} given, but an Andor SIF file holds one series")
    (width, height), n_frames, info, file_size = _header(path)
    offset = int(info["offset"])
    frame_bytes = width * height * 4
    complete = max(0, (file_size - offset) // frame_bytes) if offset <= file_size else 0
    if n_frames == 0:
        raise EmptyStackError(f"{path}: empty stack, the SIF header counts 0 frames")
    if complete == 0:
        raise StackError(f"{path}: the SIF header counts {n_frames} frames of {width} x {height} px, but the file "
                         f"holds none of them whole ({file_size} bytes, the frames start at byte {offset})")
    damage = []
    if complete < n_frames:
        damage.append(Damage(complete, f"the SIF header counts {n_frames} frames but the file ends after frame "
                                       f"{complete - 1} (cut by a crash?)",
                             f"frames {complete}..{n_frames - 1} left out; the stack ends with frame {complete - 1}"))
    n = min(n_frames, complete)
    array = np.memmap(path, dtype="<f4", mode="r", offset=offset, shape=(n, height, width))
    return Source(array, "TYX", "sif", mapped=True, damage=damage, metadata=_metadata(info))


def read_metadata(path: Path) -> MovieMetadata:
    """The camera a SIF header records (``docs/formats.md``)."""
    return _metadata(_header(Path(path))[2])


def _metadata(info: dict[str, Any]) -> MovieMetadata:
    values: dict[str, Any] = {}
    acquisition: dict[str, Any] = dict(camera_identity(str(info.get("DetectorType") or ""), None))
    settings: dict[str, str] = {}
    gain = finite_number(info.get("GainDAC"))
    if gain is not None and gain >= 1:  # the EM gain Solis set (1: no EM amplification)
        values["em_gain"] = gain
    exposure, cycle = finite_number(info.get("ExposureTime")), finite_number(info.get("CycleTime"))
    if exposure is not None and exposure > 0:
        acquisition["exposure_ms"] = round(exposure * 1e3, 9)
    if cycle is not None and cycle > 0:
        acquisition["frame_interval_ms"] = round(cycle * 1e3, 9)
    xbin, ybin = info.get("xbin"), info.get("ybin")
    if xbin and ybin:
        acquisition["binning"] = f"{int(xbin)}x{int(ybin)}"
    readout = finite_number(info.get("PixelReadoutTime"))
    if readout is not None and readout > 0:
        settings["readout_rate"] = f"{1e-6 / readout:.3g} MHz"
    return MovieMetadata("sif" if values or acquisition else None, values, acquisition, settings)
