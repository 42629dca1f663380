"""Atomic outputs: write under a temporary name, rename when complete, never leave half a file."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PARTIAL_SUFFIX = ".partial"


def partial_path(path: str | os.PathLike) -> Path:
    """The temporary name under which ``path`` is written until it is complete."""
    path = Path(path)
    return path.with_name(path.name + PARTIAL_SUFFIX)


def remove_path(path: str | os.PathLike) -> None:
    """Remove a file or a directory tree (a zarr store) if it exists."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def sync_to_disk(*paths: str | os.PathLike) -> None:
    """``fsync`` each file or folder: what a closed file or a rename recorded survives a power cut or an OS crash
    (a killed process loses nothing the OS already has; a machine that goes down loses what is still in its
    page cache)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextmanager
def atomic_output(path: str | os.PathLike, *, keep_partial: bool = False,
                  keep: Callable[[BaseException], bool] | None = None) -> Iterator[Path]:
    """Yield a temporary path to write to; on success it replaces ``path``, on error it is removed.

    Works for files and for directories (zarr stores). A stale temporary from a killed run is
    discarded first, so a resumed run starts that output afresh; with ``keep_partial`` it is kept, for a
    writer that continues it. ``keep(exc)``: an exception for which the temporary stays (a writer that can
    continue it after a stop); it never replaces ``path`` then.
    """
    final = Path(path)
    tmp = partial_path(final)
    if not keep_partial:
        remove_path(tmp)
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield tmp
    except BaseException as e:
        if keep is None or not keep(e):
            remove_path(tmp)
        raise
    if final.is_dir() and not final.is_symlink():
        shutil.rmtree(final)  # os.replace cannot replace a non-empty directory
    os.replace(tmp, final)
