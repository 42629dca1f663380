"""MATLAB files without MATLAB: v7.3 (HDF5 with MATLAB's attributes) written and read with h5py, v7 (and older)
read with scipy.io.

A v7.3 file is an HDF5 file behind a 512-byte header ("MATLAB 7.3 MAT-file ..."); a struct is a group whose
``MATLAB_class`` is ``struct`` and whose ``MATLAB_fields`` lists its fields in order, a char array a uint16
dataset, a number array a dataset transposed (MATLAB stores columns first: an N x 1 column is HDF5 shape (1, N)),
an empty array the dataset of its dimensions with ``MATLAB_empty``. What is written here follows what MATLAB
itself wrote into a real SMAP file (tests/data/tables/smap): the same attributes (``H5PATH`` too).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

HEADER_BYTES = 512
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
V5_TEXT = b"MATLAB 5.0 MAT-file"  # v4 files have no text header; v5, v6 and v7 files start so


def mat73_header() -> bytes:
    """The 512 bytes in front of the HDF5 data: text, subsystem offset, version 0x0200, byte order 'IM'."""
    text = (f"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: {time.strftime('%a %b %d %H:%M:%S %Y')} "
            f"HDF5 schema 1.00 .").encode("ascii")
    head = text.ljust(116, b" ") + bytes(8) + b"\x00\x02" + b"IM"
    return head.ljust(HEADER_BYTES, b"\x00")


def write_header(path: str | os.PathLike) -> None:
    """Put MATLAB's header into the user block of an HDF5 file made with ``userblock_size=HEADER_BYTES``."""
    with open(path, "r+b") as fh:
        fh.write(mat73_header())


def mat_version(path: str | os.PathLike) -> str | None:
    """``'7.3'`` (HDF5 after the header), ``'5'`` (a v5/v6/v7 MAT file) or None (neither)."""
    with open(path, "rb") as fh:
        head = fh.read(HEADER_BYTES + len(HDF5_MAGIC))
    if head[HEADER_BYTES:] == HDF5_MAGIC or head.startswith(HDF5_MAGIC):
        return "7.3"
    if head.startswith(V5_TEXT):
        return "5"
    return None


def _fields_attr(names: list[str]) -> np.ndarray:
    out = np.empty(len(names), dtype=object)  # one array of characters per field (not a 2-D array when alike)
    for i, name in enumerate(names):
        out[i] = np.array(list(name), dtype="S1")
    return out


def mark_struct(group: h5py.Group, names: list[str], h5path: str | None) -> None:
    """Give ``group`` MATLAB's struct attributes (fields in the order of ``names``)."""
    if h5path is not None:
        group.attrs["H5PATH"] = np.bytes_(h5path.encode())
    group.attrs["MATLAB_class"] = np.bytes_(b"struct")
    if names:  # MATLAB writes no field list for a struct without fields
        group.attrs.create("MATLAB_fields", _fields_attr(names), dtype=h5py.vlen_dtype(np.dtype("S1")))


def write_value(parent: h5py.Group, name: str, value: Any, h5path: str | None) -> None:
    """One MATLAB value: a mapping (struct), a str (char row), a number or an array (double, MATLAB's shape: a 1-D
    array is a row), None or an empty array (``[]``)."""
    if isinstance(value, Mapping):
        group = parent.create_group(name)
        mark_struct(group, list(value), h5path)
        inner = f"{h5path or '/'}{name}" if h5path is not None else f"/{name}"
        for key, item in value.items():
            write_value(group, key, item, inner)
        return
    if isinstance(value, str):
        data = np.frombuffer(value.encode("utf-16-le"), "<u2").reshape(-1, 1)
        if data.size == 0:
            _write_empty(parent, name, "char", h5path)
            return
        ds = parent.create_dataset(name, data=data)
        ds.attrs["MATLAB_class"] = np.bytes_(b"char")
        ds.attrs["MATLAB_int_decode"] = np.int32(2)
    else:
        arr = np.atleast_1d(np.asarray([] if value is None else value, np.float64))
        if arr.size == 0:
            _write_empty(parent, name, "double", h5path)
            return
        data = arr.reshape(1, -1).T if arr.ndim == 1 else arr.T  # MATLAB's columns first
        ds = parent.create_dataset(name, data=data)
        ds.attrs["MATLAB_class"] = np.bytes_(b"double")
    if h5path is not None:
        ds.attrs["H5PATH"] = np.bytes_(h5path.encode())


def _write_empty(parent: h5py.Group, name: str, cls: str, h5path: str | None) -> None:
    ds = parent.create_dataset(name, data=np.zeros(2, np.uint64))
    ds.attrs["MATLAB_class"] = np.bytes_(cls.encode())
    ds.attrs["MATLAB_empty"] = np.uint8(1)
    if h5path is not None:
        ds.attrs["H5PATH"] = np.bytes_(h5path.encode())


def is_empty(ds: h5py.Dataset) -> bool:
    return bool(ds.attrs.get("MATLAB_empty", 0))


def read_value(file: h5py.File, item: h5py.Group | h5py.Dataset) -> Any:
    """A small v7.3 value as Python: struct -> dict, char -> str, numbers -> float or 1-D array, a cell or struct
    array -> its first element, empty -> None."""
    if isinstance(item, h5py.Group):
        return {k: read_value(file, item[k]) for k in item}
    cls = item.attrs.get("MATLAB_class", b"")
    cls = cls.decode() if isinstance(cls, bytes) else str(cls)
    if is_empty(item) or item.shape is None:
        return None
    data = item[()]
    if item.dtype == h5py.ref_dtype:
        refs = np.ravel(data)
        return read_value(file, file[refs[0]]) if len(refs) and refs[0] else None
    if cls == "char":
        return np.ravel(data.T).astype("<u2").tobytes().decode("utf-16-le", "replace")
    arr = np.ravel(np.asarray(data).T)
    if arr.dtype.kind not in "fiub":
        return None
    return float(arr[0]) if arr.size == 1 else arr.astype(np.float64)


def v5_struct(obj: Any) -> Any:
    """A value from ``scipy.io.loadmat(..., squeeze_me=True, struct_as_record=False)`` as Python (as
    ``read_value``)."""
    from scipy.io.matlab import mat_struct

    if isinstance(obj, mat_struct):
        return {k: v5_struct(getattr(obj, k)) for k in obj._fieldnames}
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            return v5_struct(obj.flat[0]) if obj.size else None
        if obj.dtype.kind == "U":
            return str(obj.flat[0]) if obj.size else ""
        if obj.size == 0:
            return None
        return float(obj.flat[0]) if obj.size == 1 else obj.ravel()
    if isinstance(obj, str):
        return obj
    if isinstance(obj, (int, float, np.number)):
        return float(obj)
    return None


def file_size(path: str | os.PathLike) -> int:
    return Path(path).stat().st_size



# -- MAT v5 (v6, v7) files checked before scipy parses them: its C parser trusts every size and flag it reads (a
# complex flag on an array stored without its imaginary part is a segmentation fault in scipy 1.17)

V5_SIZES = {1: 1, 2: 1, 3: 2, 4: 2, 5: 4, 6: 4, 7: 4, 9: 8, 12: 8, 13: 8, 16: 1, 17: 2, 18: 4}  # storage type -> bytes
MI_INT32, MI_UINT32, MI_MATRIX, MI_COMPRESSED = 5, 6, 14, 15
NUMERIC_CLASSES = range(6, 16)  # mxDOUBLE .. mxUINT64
CHAR, CELL, STRUCT, OBJECT = 4, 1, 2, 3
COMPLEX_FLAG = 0x0800
MAX_DEPTH = 32


class V5Error(ValueError):
    """A MAT v5 file's structure does not hold together (``check_v5``)."""


def check_v5(path: str | os.PathLike, limit: int) -> None:
    """Walk a MAT v5 file's elements and raise ``V5Error`` saying where its structure does not hold together: an
    element larger than what holds it, a matrix whose data do not hold its dimensions' count of values (or, flagged
    complex, no imaginary part), a struct without its fields, a compressed variable that is not zlib or would
    decompress to more than ``limit`` bytes. What passes is what scipy's parser reads without reading past a
    buffer."""
    import zlib

    data = Path(path).read_bytes()
    if len(data) < 128:
        raise V5Error("shorter than a MAT file's 128-byte header")
    order = {b"IM": "<", b"MI": ">"}.get(data[126:128])
    if order is None:
        raise V5Error("no byte-order mark in the header")
    pos = 128
    while pos < len(data):
        kind, size, start, after = _element(data, pos, order, len(data))
        if kind == MI_COMPRESSED:
            unzip = zlib.decompressobj()
            try:
                inner = unzip.decompress(data[start:start + size], limit + 1)
            except zlib.error as e:
                raise V5Error(f"a compressed variable at byte {pos} is not zlib data ({e})") from None
            if len(inner) > limit:
                raise V5Error(f"a compressed variable at byte {pos} decompresses to more than {limit} bytes")
            inner_kind, inner_size, inner_start, _ = _element(inner, 0, order, len(inner))
            if inner_kind != MI_MATRIX:
                raise V5Error(f"a compressed variable at byte {pos} holds no matrix")
            _matrix(inner, inner_start, inner_start + inner_size, order)
            pos = start + size
        else:
            if kind == MI_MATRIX:
                _matrix(data, start, start + size, order)
            pos = after


def _element(data: bytes, pos: int, order: str, end: int) -> tuple[int, int, int, int]:
    """(type, size, where its data start, where the next element starts) of the element at ``pos``, whose data must
    end by ``end``."""
    import struct

    if pos + 8 > end:
        raise V5Error(f"an element's tag at byte {pos} runs past its end")
    first, second = struct.unpack_from(order + "II", data, pos)
    if first >> 16:  # a small element: type and size in one word, up to 4 bytes of data in the next
        kind, size, start, after = first & 0xFFFF, first >> 16, pos + 4, pos + 8
        if size > 4:
            raise V5Error(f"a small element at byte {pos} claims {size} bytes")
    else:
        kind, size, start = first, second, pos + 8
        after = start + size if kind == MI_MATRIX else start + size + (-size % 8)
    if start + size > end:
        raise V5Error(f"an element at byte {pos} claims {size} bytes, {end - start} are left")
    return kind, size, start, min(after, end)


def _values(data: bytes, pos: int, order: str, end: int, what: str) -> tuple[int, int, int, int]:
    """(number of values, storage type, where they start, where the next element starts) of a data element."""
    kind, size, start, after = _element(data, pos, order, end)
    if kind not in V5_SIZES or size % V5_SIZES[kind]:
        raise V5Error(f"the {what} at byte {pos} are of type {kind} in {size} bytes")
    return size // V5_SIZES[kind], kind, start, after


def _matrix(data: bytes, pos: int, end: int, order: str, depth: int = 0) -> None:
    """Check the miMATRIX whose data run from ``pos`` to ``end``."""
    import struct

    if depth > MAX_DEPTH:
        raise V5Error(f"matrices nested more than {MAX_DEPTH} deep")
    if pos == end:  # an empty matrix element (MATLAB writes one for an empty cell or field)
        return
    count, kind, start, pos = _values(data, pos, order, end, "array flags")
    if kind != MI_UINT32 or count != 2:
        raise V5Error(f"a matrix at byte {start - 8} has no array flags")
    flags = struct.unpack_from(order + "I", data, start)[0]
    cls = flags & 0xFF
    count, kind, start, pos = _values(data, pos, order, end, "dimensions")
    if kind != MI_INT32 or count < 2:
        raise V5Error(f"a matrix's dimensions at byte {start} are not two or more int32")
    dims = struct.unpack_from(order + f"{count}i", data, start)
    if any(d < 0 for d in dims):
        raise V5Error(f"a matrix has the dimensions {dims}")
    n = 1
    for d in dims:
        n *= d
    _, _, _, pos = _values(data, pos, order, end, "name")
    if cls in NUMERIC_CLASSES or cls == CHAR:
        for part in range(2 if flags & COMPLEX_FLAG else 1):
            values, _, _, pos = _values(data, pos, order, end, "imaginary part" if part else "values")
            if values != n:
                raise V5Error(f"a {'x'.join(map(str, dims))} matrix holds {values} values")
        return
    fields = 1
    if cls in (STRUCT, OBJECT):
        if cls == OBJECT:
            _, _, _, pos = _values(data, pos, order, end, "class name")
        count, kind, start, pos = _values(data, pos, order, end, "field name length")
        if kind != MI_INT32 or count != 1:
            raise V5Error(f"a struct's field name length at byte {start} is not one int32")
        length = struct.unpack_from(order + "i", data, start)[0]
        names, _, _, pos = _values(data, pos, order, end, "field names")
        if length <= 0 or names % length:
            raise V5Error(f"a struct's field names ({names} bytes) are not names of {length} bytes")
        fields = names // length
    elif cls != CELL:
        return  # sparse, function, opaque: not in a SMAP file; scipy reads them or says so
    for _ in range(n * fields):
        kind, size, start, pos = _element(data, pos, order, end)
        if kind != MI_MATRIX:
            raise V5Error(f"a {'cell' if cls == CELL else 'struct field'} at byte {start - 8} holds no matrix")
        _matrix(data, start, start + size, order, depth + 1)
