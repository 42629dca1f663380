"""The microscope formats ``open_stack`` reads through their own libraries (the ``formats`` extra): how a file is
recognised (by its first bytes, or an NDTiff dataset's index file), which library reads it, and the one line a user
gets where that library is not installed.

    Nikon ND2 (nd2), Zeiss CZI (pylibCZIrw, Zeiss's libCZI), Leica LIF (readlif), Andor SIF (sif_parser),
    Micro-Manager 2 NDTiff datasets (ndtiff)
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from decode_mem.errors import StackError

EXTRA = "formats"
INSTALL = f'pip install "decode_mem[{EXTRA}]" (in a clone: pip install -e ".[{EXTRA}]")'
HEAD_BYTES = 64
NDTIFF_INDEX = "NDTiff.index"


@dataclass(frozen=True)
class VendorFormat:
    """One microscope format: its name, the library that reads it and decode_mem's module over that library."""

    key: str  # 'nd2', 'czi', 'lif', 'sif', 'ndtiff'
    name: str  # what users call it
    package: str  # the import name of the library
    reader: str  # decode_mem's module: open_source(path, series, channel, z) and read_metadata(path)
    suffixes: tuple[str, ...]  # what a folder given to infer contributes

    def available(self) -> bool:
        return importlib.util.find_spec(self.package) is not None

    def module(self) -> ModuleType:
        return importlib.import_module(self.reader)

    def require(self, path: Path) -> ModuleType:
        """decode_mem's reader module, or one StackError naming the extra to install."""
        if not self.available():
            raise StackError(f"{path}: a {self.name} file; reading it needs the {self.package} library of the "
                             f"'{EXTRA}' extra: {INSTALL}")
        return self.module()


FORMATS = {
    "nd2": VendorFormat("nd2", "Nikon ND2", "nd2", "decode_mem.io._nd2", (".nd2",)),
    "czi": VendorFormat("czi", "Zeiss CZI", "pylibCZIrw", "decode_mem.io._czi", (".czi",)),
    "lif": VendorFormat("lif", "Leica LIF", "readlif", "decode_mem.io._lif", (".lif",)),
    "sif": VendorFormat("sif", "Andor SIF", "sif_parser", "decode_mem.io._sif", (".sif",)),
    "ndtiff": VendorFormat("ndtiff", "Micro-Manager NDTiff dataset", "ndtiff", "decode_mem.io._ndtiff", ()),
}
SUFFIXES = tuple(s for f in FORMATS.values() for s in f.suffixes)


def sniff(head: bytes) -> VendorFormat | None:
    """The microscope format whose signature a file's first bytes carry, or None."""
    if head.startswith(b"\xda\xce\xbe\x0a") or head.startswith(b"\x00\x00\x00\x0cjP  "):  # ND2; legacy JPEG 2000 ND2
        return FORMATS["nd2"]
    if head.startswith(b"ZISRAWFILE"):
        return FORMATS["czi"]
    if head[:4] == b"\x70\x00\x00\x00" and head[8:9] == b"\x2a":  # LIF: block magic 0x70, memory byte 0x2A
        return FORMATS["lif"]
    if head.startswith(b"Andor Technology Multi-Channel File"):
        return FORMATS["sif"]
    return None


def is_ndtiff(path: str | os.PathLike) -> bool:
    """A Micro-Manager 2 / pycro-manager NDTiff dataset: a folder holding ``NDTiff.index``."""
    return Path(path).is_dir() and (Path(path) / NDTIFF_INDEX).is_file()


def vendor_format(path: str | os.PathLike) -> VendorFormat | None:
    """The microscope format of a file or folder (by content, not by name), or None."""
    path = Path(path)
    if is_ndtiff(path):
        return FORMATS["ndtiff"]
    if not path.is_file():
        return None
    with open(path, "rb") as fh:
        return sniff(fh.read(HEAD_BYTES))
