"""Argument types shared by the command-line tools."""

from __future__ import annotations

import argparse


def int_or_auto(value: str) -> int | str:
    """argparse type for sizes that may be chosen automatically: an integer or the word 'auto'."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'auto', got {value!r}") from None
