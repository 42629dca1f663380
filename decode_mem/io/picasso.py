"""Picasso localizations: HDF5 dataset ``/locs`` plus a ``.yaml`` sidecar, readable by ``picasso.io.load_locs``.

Layout (checked against picassosr 0.11.3: ``io.save_locs``/``load_locs``/``load_info``, ``lib.ensure_sanity``,
``gausslq.locs_from_fits``):

- ``/locs``: a compound dataset with Picasso's own column names and types, in its order:
  ``frame`` (u4), ``x``, ``y``, ``photons``, ``sx``, ``sy``, ``bg``, ``lpx``, ``lpy`` (f4); for 3D then
  ``z`` and ``lpz`` (nm); then the requested extras ``prob`` and ``photons_unc`` (f4).
- Coordinates in camera pixels with pixel centres at integer coordinates: Picasso's fitters return
  ``x = θx + pixel_index`` on a fit grid centred on 0, the same convention as ours (DESIGN.md §3), so x
  and y are written unchanged. Frames are 0-based, ``bg`` is photons per pixel, ``z`` and ``lpz`` nm.
- ``lpx``/``lpy`` (px) are the table's ``sigma_x``/``sigma_y`` (the network's predicted localization
  error) when present, otherwise the Mortensen bound Picasso itself uses for LQ fits, from photons, bg
  and the writer's ``psf_sigma``. ``sx``/``sy`` are that PSF sigma: the network does not fit a width.
  Never NaN: ``picasso.lib.ensure_sanity`` silently drops every row with a NaN in any column.
- ``.yaml``: Picasso's multi-document metadata (a movie document, then a "decode_mem" step with
  ``Pixelsize``, ``Width``, ``Height``, ``Frames``); Picasso >= 0.11 also reads the same list as JSON
  from a ``/metadata`` dataset, which is written too.

Note: Picasso drops rows with ``x < 0`` or ``y < 0`` when loading, i.e. emitters in the outer half of
the first pixel row/column; they are kept in the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np
import yaml

from decode_mem.config import yaml_problem
from decode_mem.errors import ConfigError, StackError, exception_line
from decode_mem.io._errors import LOW_LEVEL, reading
from decode_mem.io.atomic import atomic_output
from decode_mem.io.provenance import generated_by
from decode_mem.io.table import EmitterTable

BASE_DTYPE = [("frame", "<u4"), ("x", "<f4"), ("y", "<f4"), ("photons", "<f4"), ("sx", "<f4"), ("sy", "<f4"),
              ("bg", "<f4"), ("lpx", "<f4"), ("lpy", "<f4")]
Z_DTYPE = [("z", "<f4"), ("lpz", "<f4")]
EXTRA_COLUMNS = {"prob": "prob", "sigma_photons": "photons_unc"}  # table column -> Picasso column
IGNORED_EXTRAS = ("sigma_x", "sigma_y", "sigma_z")  # always used for lpx/lpy/lpz when present
FLUSH_ROWS = 65_536
H5_CHUNK_ROWS = 16_384




def yaml_path(path: str | os.PathLike) -> Path:
    """The ``.yaml`` sidecar of a Picasso ``.hdf5`` file (same base name)."""
    return Path(path).with_suffix(".yaml")


def locs_dtype(three_d: bool = False, extras: tuple[str, ...] = ()) -> np.dtype:
    """The compound dtype of ``/locs`` for these options."""
    fields = BASE_DTYPE + (Z_DTYPE if three_d else [])
    fields += [(EXTRA_COLUMNS[e], "<f4") for e in extras if e in EXTRA_COLUMNS]
    return np.dtype(fields)


def mortensen_precision(photons: np.ndarray, bg: np.ndarray, psf_sigma: float) -> np.ndarray:
    """Localization precision (px) of a symmetric Gaussian PSF, Mortensen et al. 2010 (as Picasso's LQ fit).

    ``var = sa² (16/9 + 8π sa² bg / N) / N`` with ``sa² = σ² + 1/12``; N is clipped to >= 1 photon and
    bg to >= 0 so that the result is always finite.
    """
    n = np.maximum(np.asarray(photons, np.float64), 1.0)
    b = np.maximum(np.asarray(bg, np.float64), 0.0)
    sa2 = float(psf_sigma) ** 2 + 1.0 / 12.0
    return np.sqrt(sa2 * (16.0 / 9.0 + 8.0 * np.pi * sa2 * b / n) / n)


class PicassoWriter:
    """Streaming Picasso writer: ``write(table)`` appends rows to a resizable ``/locs`` dataset.

    Rows are buffered up to 65,536 and appended in one resize, in whole chunks of ``/locs`` (the rest waits
    for the next append), so memory stays bounded. The ``.hdf5``
    and ``.yaml`` are written under ``*.partial`` names and renamed on a clean exit (yaml first, so an
    ``.hdf5`` under its final name is always complete); an exception inside the block removes both.
    ``frames`` (the stack length) defaults to the largest frame written + 1 (at least 1).
    """

    def __init__(self, path: str | os.PathLike, *, width: int, height: int, pixel_size: float,
                 frames: int | None = None, extras: tuple[str, ...] = (), three_d: bool = False,
                 psf_sigma: float = 1.0, source: str | None = None, source_dtype: str = "uint16",
                 info: Mapping[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.yaml_path = yaml_path(self.path)
        unknown = [e for e in extras if e not in EXTRA_COLUMNS and e not in IGNORED_EXTRAS]
        if unknown:
            raise ValueError(f"PicassoWriter: unknown extra columns {unknown}")
        if not (width and height and width > 0 and height > 0):
            raise ConfigError(f"PicassoWriter: width and height (px) must be > 0, got {width} x {height}")
        if not pixel_size or pixel_size <= 0:
            raise ConfigError(f"PicassoWriter: pixel_size must be > 0 nm, got {pixel_size}")
        if not psf_sigma > 0:
            raise ConfigError(f"PicassoWriter: psf_sigma must be > 0 px, got {psf_sigma}")
        self.width, self.height, self.pixel_size = int(width), int(height), float(pixel_size)
        self.frames = None if frames is None else int(frames)
        self.extras = tuple(e for e in extras if e in EXTRA_COLUMNS)
        self.three_d = bool(three_d)
        self.psf_sigma = float(psf_sigma)
        self.source, self.source_dtype = source, str(source_dtype)
        self.info = dict(info or {})
        self.dtype = locs_dtype(self.three_d, self.extras)
        self._atomic = ExitStack()
        self._tmp_yaml: Path | None = None
        self._file: h5py.File | None = None
        self._buffer: list[np.ndarray] = []
        self._buffered = 0
        self._rows = 0
        self._max_frame = -1
        self._lp_sources: set[str] = set()

    def __enter__(self) -> PicassoWriter:
        # the .hdf5 first, the .yaml second: on a clean exit the yaml is renamed first (ExitStack unwinds LIFO)
        tmp = self._atomic.enter_context(atomic_output(self.path))
        self._tmp_yaml = self._atomic.enter_context(atomic_output(self.yaml_path))
        self._file = h5py.File(tmp, "w")
        self._file.create_dataset("locs", shape=(0,), maxshape=(None,), dtype=self.dtype,
                                  chunks=(min(H5_CHUNK_ROWS, FLUSH_ROWS),))
        return self

    def records(self, table: EmitterTable) -> np.ndarray:
        """``table`` as rows of ``/locs`` (a structured array)."""
        n = len(table)
        if n and int(table["frame"].min()) < 0:
            raise ValueError("PicassoWriter: negative frame index")
        rec = np.zeros(n, self.dtype)
        for name in ("frame", "x", "y", "photons", "bg"):
            rec[name] = table[name]
        rec["sx"] = rec["sy"] = self.psf_sigma
        if "sigma_x" in table and "sigma_y" in table:
            rec["lpx"], rec["lpy"] = table["sigma_x"], table["sigma_y"]
            self._lp_sources.add("network sigma_x/sigma_y")
        else:
            rec["lpx"] = rec["lpy"] = mortensen_precision(table["photons"], table["bg"], self.psf_sigma)
            self._lp_sources.add(f"Mortensen bound with PSF sigma {self.psf_sigma:g} px")
        if self.three_d:
            rec["z"] = table["z"]
            if "sigma_z" in table:
                rec["lpz"] = table["sigma_z"]
            else:  # Picasso's own render fallback: twice the mean lateral precision
                rec["lpz"] = (rec["lpx"] + rec["lpy"]) * self.pixel_size
        for extra in self.extras:
            if extra not in table:
                raise ValueError(f"PicassoWriter: table has no '{extra}' column (NaN rows are dropped by Picasso)")
            rec[EXTRA_COLUMNS[extra]] = table[extra]
        return rec

    def write(self, table: EmitterTable) -> None:
        if len(table) == 0:
            return
        self._buffer.append(self.records(table))
        self._buffered += len(table)
        self._max_frame = max(self._max_frame, int(table["frame"].max()))
        if self._buffered >= FLUSH_ROWS:
            self._flush(whole_chunks=True)

    def _flush(self, whole_chunks: bool = False) -> None:
        """Append the buffer to ``/locs``; with ``whole_chunks`` only whole HDF5 chunks (the rest stays
        buffered), so that every append starts on a chunk boundary and no chunk is written twice."""
        if not self._buffer:
            return
        block = self._buffer[0] if len(self._buffer) == 1 else np.concatenate(self._buffer)
        chunk = self._file["locs"].chunks[0]
        end = len(block) - len(block) % chunk if whole_chunks else len(block)
        if end:
            ds = self._file["locs"]
            ds.resize((self._rows + end,))
            ds[self._rows:] = block[:end]
            self._rows += end
        self._buffer = [block[end:].copy()] if end < len(block) else []
        self._buffered = len(block) - end

    def info_docs(self) -> list[dict[str, Any]]:
        """The metadata documents (Picasso's list of dicts) written to the ``.yaml`` and ``/metadata``."""
        frames = self.frames if self.frames is not None else self._max_frame + 1
        frames = max(frames, 1)  # Picasso treats "Frames: 0" as missing and refuses the file
        movie: dict[str, Any] = {"Byte Order": "<", "Data Type": self.source_dtype, "Frames": frames,
                                 "Height": self.height, "Width": self.width}
        if self.source:
            movie["File"] = str(self.source)
        step = {"Generated by": generated_by(), "Fit method": "decode_mem (DECODE-style network)",
                "Pixelsize": self.pixel_size, "Frames": frames, "Height": self.height, "Width": self.width,
                "Localizations": self._rows, "lpx/lpy": "; ".join(sorted(self._lp_sources)) or "none",
                "sx/sy": f"PSF sigma given to the writer ({self.psf_sigma:g} px), not fitted"}
        step.update(self.info)
        return [movie, step]

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if exc_type is None:
                self._flush()
                docs = self.info_docs()
                self._file.create_dataset("metadata", data=json.dumps(docs))
                self._file.close()
                with open(self._tmp_yaml, "w") as fh:
                    yaml.safe_dump_all(docs, fh, default_flow_style=False, sort_keys=False)
        except BaseException as e:
            exc_type, exc, tb = type(e), e, e.__traceback__
            raise
        finally:
            self._file.close()  # a no-op when already closed
            self._buffer = []
            self._atomic.__exit__(exc_type, exc, tb)  # both renamed when complete, both removed on an error


def write_picasso(table: EmitterTable, path: str | os.PathLike, *, width: int, height: int, pixel_size: float,
                  **kwargs: Any) -> None:
    """Write a whole table atomically; ``prob``/``sigma_photons`` are kept when the table has them."""
    kwargs.setdefault("extras", tuple(e for e in EXTRA_COLUMNS if e in table))
    with PicassoWriter(path, width=width, height=height, pixel_size=pixel_size, **kwargs) as writer:
        writer.write(table)


def read_picasso_info(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Picasso's metadata list: the ``.yaml`` sidecar, else the ``/metadata`` dataset (Picasso >= 0.11)."""
    path = Path(path)
    sidecar = yaml_path(path)
    if sidecar.is_file():
        try:
            docs = [d for d in yaml.safe_load_all(sidecar.read_text(encoding="utf-8")) if d is not None]
        except UnicodeDecodeError as e:
            raise StackError(f"{sidecar}: not a text file (byte {e.start} is not UTF-8 text)") from None
        except yaml.YAMLError as e:
            raise StackError(f"{sidecar}: not valid YAML: {yaml_problem(e)}") from e
        if not all(isinstance(d, dict) for d in docs):
            raise StackError(f"{sidecar}: expected YAML documents that are mappings")
        return docs
    try:
        with h5py.File(path, "r") as f:
            raw = f["metadata"][()] if "metadata" in f else None
    except LOW_LEVEL as e:  # h5py: a damaged file or dataset
        raise StackError(f"{path}: not a readable HDF5 file: {exception_line(e)}") from e
    if raw is None:
        raise StackError(f"{path}: no metadata: neither {sidecar.name} nor a /metadata dataset")
    try:
        docs = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    except (ValueError, TypeError, AttributeError) as e:
        raise StackError(f"{path}: its /metadata dataset is not Picasso's JSON list ({exception_line(e)})") from e
    if not isinstance(docs, list) or not all(isinstance(d, dict) for d in docs):
        raise StackError(f"{path}: its /metadata dataset is not a list of mappings")
    return docs


def picasso_meta(path: str | os.PathLike) -> dict[str, Any]:
    """``pixel_size`` (nm), ``width``, ``height`` (px), ``frames`` from the metadata (later documents win)."""
    docs = read_picasso_info(path)
    keys = {"pixel_size": "Pixelsize", "width": "Width", "height": "Height", "frames": "Frames"}
    meta: dict[str, Any] = {}
    for ours, theirs in keys.items():
        meta[ours] = next((d[theirs] for d in reversed(docs) if d.get(theirs) is not None), None)
    return meta


TABLE_FROM_PICASSO = {"frame": "frame", "x": "x", "y": "y", "z": "z", "photons": "photons", "bg": "bg",
                      "sigma_x": "lpx", "sigma_y": "lpy", "sigma_z": "lpz", "prob": "prob",
                      "sigma_photons": "photons_unc"}


def picasso_columns(path: str | os.PathLike) -> tuple[str, ...]:
    """The column names of ``/locs``."""
    try:
        with h5py.File(path, "r") as f:
            ds = f.get("locs")
            return tuple(ds.dtype.names or ()) if isinstance(ds, h5py.Dataset) else ()
    except OSError as e:
        raise StackError(f"{path}: not a readable HDF5 file: {exception_line(e, with_type=False)}") from e


def iter_picasso(path: str | os.PathLike, chunk_rows: int = 1 << 20) -> Iterator[EmitterTable]:
    """Yield ``/locs`` as tables of at most ``chunk_rows`` rows (pixels, 0-based frames, z nm).

    ``lpx``/``lpy``/``lpz`` become ``sigma_x``/``sigma_y`` (px) and ``sigma_z`` (nm); ``prob`` and
    ``photons_unc`` (as ``sigma_photons``) are kept; other Picasso columns are ignored.
    """
    path = Path(path)
    if not path.is_file():
        raise StackError(f"{path}: no such localization file")
    try:
        f = h5py.File(path, "r")
    except LOW_LEVEL as e:
        raise StackError(f"{path}: not a readable HDF5 file: {exception_line(e)}") from e
    with f:
        with reading(path, "a Picasso file"):  # h5py's errors of a damaged structure
            ds = f.get("locs")
        if not isinstance(ds, h5py.Dataset) or ds.dtype.names is None:
            raise StackError(f"{path}: no compound '/locs' dataset (not a Picasso localization file)")
        missing = [c for c in ("frame", "x", "y") if c not in ds.dtype.names]
        if missing:
            raise StackError(f"{path}: '/locs' lacks the columns {missing}")
        wanted = {ours: theirs for ours, theirs in TABLE_FROM_PICASSO.items() if theirs in ds.dtype.names}
        if "lpy" not in ds.dtype.names:
            wanted.pop("sigma_x", None)
        if "lpx" not in ds.dtype.names:
            wanted.pop("sigma_y", None)
        if ds.ndim != 1:
            raise StackError(f"{path}: '/locs' is a {ds.ndim}-D dataset, not a table")
        n = len(ds)
        for start in range(0, max(n, 1), chunk_rows):
            try:
                block = ds[start:min(start + chunk_rows, n)]
            except LOW_LEVEL as e:  # h5py: rows the file does not hold (cut, damaged)
                raise StackError(f"{path}: rows {start}.. of '/locs' cannot be read ({exception_line(e)})") from e
            columns = {ours: block[theirs] for ours, theirs in wanted.items()}
            columns.setdefault("photons", np.zeros(len(block), np.float32))
            yield EmitterTable.from_arrays(**columns)


def read_picasso(path: str | os.PathLike) -> EmitterTable:
    """Read a Picasso ``.hdf5`` (ours or Picasso's own) into an :class:`EmitterTable`."""
    return EmitterTable.concat(iter_picasso(path))
