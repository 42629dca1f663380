"""Provenance written into output files' headers."""

from __future__ import annotations

from importlib import metadata


def generated_by() -> str:
    """``decode_mem <version>`` from the installed distribution (io does not import the package)."""
    try:
        return f"decode_mem {metadata.version('decode_mem')}"
    except metadata.PackageNotFoundError:
        return "decode_mem"
