"""Linking: the localizations of one emitter that stays on over consecutive frames become one molecule (Picasso's
"link", SMAP's "grouping", ThunderSTORM's "merging"), streamed in frame order; names load lazily.

``Linker(radius_px, max_dark, correlation).feed(table)`` -> :class:`LinkStep` per block; ``link_table(table,
radius_px)`` for a table in memory; ``link_file(LOCS, DIR)`` writes the molecules and the localizations with
their molecule id. CLI: ``python -m decode_mem.link LOCS --out DIR``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.link.core import Linker, LinkPairs, LinkStep, Molecules, link_table
    from decode_mem.link.correlation import (
        CORRELATIONS,
        DECODE_MEM,
        DECODE_MEM_LIGHT,
        DECODE_MEM_WIDE,
        INDEPENDENT,
        ErrorCorrelation,
        correlation_of,
        for_file,
        for_model,
    )
    from decode_mem.link.files import LinkResult, link_file, linked_paths

__all__ = ["CORRELATIONS", "DECODE_MEM", "DECODE_MEM_LIGHT", "DECODE_MEM_WIDE", "INDEPENDENT", "ErrorCorrelation",
           "LinkPairs", "LinkResult", "LinkStep", "Linker", "Molecules", "correlation_of", "for_file", "for_model",
           "link_file", "link_table", "linked_paths"]
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(["Linker", "LinkPairs", "LinkStep", "Molecules", "link_table"], "core"),
    **dict.fromkeys(["CORRELATIONS", "DECODE_MEM", "DECODE_MEM_LIGHT", "DECODE_MEM_WIDE", "INDEPENDENT",
                     "ErrorCorrelation", "correlation_of", "for_file", "for_model"], "correlation"),
    **dict.fromkeys(["LinkResult", "link_file", "linked_paths"], "files"),
})
