"""A camera stand-in for the ``--follow`` tests: appends frames to a stack at a set rate, in its own process.

    python live_writer.py KIND FRAMES.npy TARGET --rate 50 --pause_at 20 --pause_s 1.5 --split_at 7 --split_s 0.4

KIND: ``tiff``, ``bigtiff``, ``ome`` (OME-XML in the first page), ``mm`` (Micro-Manager's roll-over to
``<name>_1.ome.tif``, ... every ``--per_file`` pages), ``zarr`` (chunks along time, appended), ``folder`` (one TIFF
file per frame), ``ndtiff`` (a Micro-Manager NDTiff dataset written by the ndtiff library, each image flushed as it
lands, then its index entry: TARGET is the dataset folder the library makes). The TIFF writers link each new page
before writing it (the previous next-IFD offset points past the end of the file until the IFD is there) and write
the page ``--split_at`` in two parts, ``--split_s`` apart: its first half, then the rest. ``--pause_at`` frames in,
the writer stops for ``--pause_s`` seconds; ``--hold_at`` frames in, it waits until the file ``--hold_file`` exists
(a benchmark starts the timed camera phase once the run is going)."""

from __future__ import annotations

import argparse
import os
import struct
import time
from pathlib import Path

import numpy as np

OME = ('<?xml version="1.0" encoding="UTF-8"?><OME xmlns="http://www.openmicroscopy.org/Schemas/OME/2016-06">'
       '<Image ID="Image:0"><Pixels ID="Pixels:0" DimensionOrder="XYCZT" Type="uint16" SizeX="{w}" SizeY="{h}" '
       'SizeC="1" SizeZ="1" SizeT="{n}" BigEndian="false"><Channel ID="Channel:0:0" SamplesPerPixel="1"/>'
       '<TiffData IFD="0" PlaneCount="{n}"/></Pixels></Image></OME>')


class TiffAppender:
    """A minimal little-endian TIFF / BigTIFF writer that appends one uncompressed page at a time."""

    def __init__(self, path: Path, big: bool, description: str | None = None) -> None:
        self.fh = open(path, "wb")  # noqa: SIM115 (closed by close(): pages are appended over time)
        self.big = big
        self.description = description
        head = b"II+\0" + struct.pack("<HHQ", 8, 0, 0) if big else b"II*\0" + struct.pack("<I", 0)
        self.fh.write(head)
        self.fh.flush()
        self.ptr_pos = 8 if big else 4
        self.pages = 0

    def _entry(self, tag: int, typ: int, count: int, value: int | bytes) -> bytes:
        if self.big:
            raw = value if isinstance(value, bytes) else struct.pack("<Q", value)
            return struct.pack("<HHQ", tag, typ, count) + raw.ljust(8, b"\0")
        raw = value if isinstance(value, bytes) else struct.pack("<I", value)
        return struct.pack("<HHI", tag, typ, count) + raw.ljust(4, b"\0")

    def append(self, frame: np.ndarray, split_s: float = 0.0) -> None:
        fh = self.fh
        fh.seek(0, os.SEEK_END)
        ifd = fh.tell()
        h, w = frame.shape
        desc = (self.description.encode() + b"\0") if self.description is not None and self.pages == 0 else None
        n_tags = 11 + (desc is not None)
        count_size, entry, ptr = (8, 20, 8) if self.big else (2, 12, 4)
        after_ifd = ifd + count_size + n_tags * entry + ptr
        desc_at = after_ifd
        data_at = after_ifd + (len(desc) if desc is not None else 0)
        data_at += data_at % 2
        long_type = 16 if self.big else 4
        tags = [self._entry(254, 4, 1, 0), self._entry(256, 4, 1, w), self._entry(257, 4, 1, h),
                self._entry(258, 3, 1, 16), self._entry(259, 3, 1, 1), self._entry(262, 3, 1, 1)]
        if desc is not None:
            tags.append(self._entry(270, 2, len(desc), desc_at))
        tags += [self._entry(273, long_type, 1, data_at), self._entry(277, 3, 1, 1), self._entry(278, 4, 1, h),
                 self._entry(279, long_type, 1, frame.nbytes), self._entry(339, 3, 1, 1)]
        block = struct.pack("<Q" if self.big else "<H", n_tags) + b"".join(tags) + b"\0" * ptr
        # link first: the previous next-IFD offset points past the end of the file until the IFD is written
        fh.seek(self.ptr_pos)
        fh.write(struct.pack("<Q" if self.big else "<I", ifd))
        fh.flush()
        fh.seek(ifd)
        fh.write(block)
        if desc is not None:
            fh.write(desc)
        fh.write(b"\0" * (data_at - fh.tell()))
        data = np.ascontiguousarray(frame, "<u2").tobytes()
        if split_s:
            fh.write(data[: len(data) // 2])
            fh.flush()
            time.sleep(split_s)
            fh.write(data[len(data) // 2:])
        else:
            fh.write(data)
        fh.flush()
        self.ptr_pos = ifd + count_size + n_tags * entry
        self.pages += 1

    def close(self) -> None:
        self.fh.close()


def write(kind: str, frames: np.ndarray, target: Path, rate: float, pause_at: int, pause_s: float,
          split_at: int, split_s: float, per_file: int, chunk: int, hold_at: int = -1,
          hold_file: Path | None = None) -> None:
    n, h, w = frames.shape
    t_next = time.monotonic()
    appender: TiffAppender | None = None
    zarr_array = None
    if kind == "zarr":
        import zarr

        zarr_array = zarr.create_array(str(target), shape=(0, h, w), chunks=(chunk, h, w), dtype=frames.dtype,
                                       dimension_names=("t", "y", "x"), overwrite=True)
    if kind == "folder":
        import tifffile

        target.mkdir(parents=True, exist_ok=True)
    dataset = None
    if kind == "ndtiff":
        from ndtiff import NDTiffDataset

        dataset = NDTiffDataset(str(target.parent), name=target.name.rsplit("_", 1)[0], writable=True,
                                summary_metadata={"Prefix": "movie"})
        assert Path(dataset.path).resolve() == target.resolve(), (dataset.path, target)
    t = 0
    while t < n:
        if t == pause_at:
            time.sleep(pause_s)
            t_next = time.monotonic()
        if t == hold_at and hold_file is not None:
            while not hold_file.exists():
                time.sleep(0.01)
            t_next = time.monotonic()
        step = chunk if kind == "zarr" else 1
        t0 = t
        stop = min(t + step, n)
        split = split_s if t <= split_at < stop else 0.0
        if kind in ("tiff", "bigtiff", "ome", "mm"):
            if kind == "mm" and t % per_file == 0:
                if appender is not None:
                    appender.close()
                k = t // per_file
                name = target.name if k == 0 else target.name.replace(".ome.tif", f"_{k}.ome.tif")
                appender = TiffAppender(target.with_name(name), big=False)
            elif appender is None:
                appender = TiffAppender(target, big=kind == "bigtiff",
                                        description=OME.format(w=w, h=h, n=n) if kind == "ome" else None)
            appender.append(frames[t], split_s=split)
        elif kind == "zarr":
            zarr_array.resize((stop, h, w))  # the shape grows before the chunk is written
            half = t + (stop - t) // 2
            if split and half > t:
                zarr_array[t:half] = frames[t:half]
                time.sleep(split)
                zarr_array[half:stop] = frames[half:stop]
            else:
                zarr_array[t:stop] = frames[t:stop]
        elif kind == "ndtiff":
            dataset.put_image({"time": t}, frames[t], {"Frame": t})  # buffered by the library: flushed here
            dataset.current_writer.file.flush()  # the image's pixels first, its index entry after (split_s later)
            if split:
                time.sleep(split)
            dataset._index_file.flush()
        else:
            path = target / f"frame_{t}.tif"
            data = _tiff_bytes(tifffile, frames[t])
            with open(path, "wb") as fh:
                if split:
                    fh.write(data[: len(data) // 2])
                    fh.flush()
                    time.sleep(split)
                    fh.write(data[len(data) // 2:])
                else:
                    fh.write(data)
        t = stop
        t_next += (stop - t0) / rate
        delay = t_next - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    if appender is not None:
        appender.close()
    if dataset is not None:
        dataset.finish()
        dataset.close()


def _tiff_bytes(tifffile, frame: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    tifffile.imwrite(buf, frame)
    return buf.getvalue()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("kind")
    p.add_argument("frames")
    p.add_argument("target")
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--pause_at", type=int, default=-1)
    p.add_argument("--pause_s", type=float, default=0.0)
    p.add_argument("--split_at", type=int, default=-1)
    p.add_argument("--split_s", type=float, default=0.0)
    p.add_argument("--per_file", type=int, default=10)
    p.add_argument("--chunk", type=int, default=4)
    p.add_argument("--hold_at", type=int, default=-1)
    p.add_argument("--hold_file")
    a = p.parse_args()
    write(a.kind, np.load(a.frames), Path(a.target), a.rate, a.pause_at, a.pause_s, a.split_at, a.split_s,
          a.per_file, a.chunk, a.hold_at, None if a.hold_file is None else Path(a.hold_file))


if __name__ == "__main__":
    main()
