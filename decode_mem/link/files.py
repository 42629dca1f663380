"""Link a localization file: ``link_file(LOCS, DIR)`` streams ``LOCS`` (any format ``decode_mem.io.localizations``
reads, in frame order) through a :class:`~decode_mem.link.core.Linker` and writes, in the input's format (a
rapidSTORM table's as ThunderSTORM CSV),

* ``DIR/<stem>_link<suffix>``: one row per molecule (Picasso's own name for a linked file): its first frame,
  photon-weighted position, summed photons, mean bg, combined precision (``lpx``/``lpy``, ``sigma_x [nm]``,
  ``uncertainty [nm]``) and ``len`` (frames from first to last), ``n`` (localizations), ``photon_rate``
  (photons / n) and ``group`` (the molecule's id); rows in the order molecules end;
* ``DIR/<stem>_group<suffix>``: every localization, in frame order, with the ``group`` of its molecule.

Reading, linking and writing run on three threads, each queue a few chunks long. Memory: those chunks and the
linking window, whatever the file's length. glibc keeps the heap those threads free in turn, fragmented, and
without handing its free pages back (``footprint.heap``, every ``TRIM_EVERY`` chunks) a link's RssAnon grew with the
table (10^8 rows: 220 -> 475 MB, benchmarks/results/postprocess_stream.png at a7ab26b). Every file appears complete
under its name or not at all.

The same pass measures how crowded the movie is for linking at the radius (``link.crowding``): a warning where
more than 2 % of multi-frame blinks have a neighbour a link can reach.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import ConfigError, StackError
from decode_mem.footprint.heap import release_free_heap
from decode_mem.io.localizations import (
    IN_PIXELS,
    iter_localizations,
    localization_meta,
    working_unit,
    written_as,
)
from decode_mem.io.prefetch import prefetch
from decode_mem.io.table import OPTIONAL, EmitterTable
from decode_mem.io.write_behind import WriteBehind
from decode_mem.link.core import WORK_ROWS, Linker, LinkStep
from decode_mem.link.correlation import ErrorCorrelation, for_file
from decode_mem.link.crowding import ChanceNeighbours, Crowding
from decode_mem.link.writers import open_writer_with_columns

# 'auto' linking: a radius of AUTO_FACTOR x the median predicted σ (x and y) of the first rows, and beyond it pairs
# within AUTO_SIGMA_GATE combined σ of their own, up to AUTO_REACH radii (core.py's sigma gate). The median, not the
# RMS: a few gross σ (crowded spots) inflate the RMS (filaments: RMS 22 nm, median 14 nm). On the benchmark movies
# a fixed radius of 8 x the median and 4 x with this gate met both goals (>= 95 % of multi-frame events recovered,
# < 2 % merged with another emitter) on as many of the first 7 (4); the gate recovered more at every density
# (benchmarks/results/postprocess.md scans both, and says which movies were seen when these were chosen). A reach
# of 2 radii merged fewer than 4 (held-out 0.5/µm²: 0.018 against 0.023; a scan in the commit that chose it)
AUTO_FACTOR = 4.0
AUTO_SIGMA_GATE = 4.0
AUTO_REACH = 2.0
WRITE_DEPTH = 4  # linked chunks that may wait for the writer thread
TRIM_EVERY = 8  # linked chunks (of WORK_ROWS) between hand-backs of the heap's free pages (module docstring)
MOLECULE_COLUMNS = ("len", "n", "photon_rate", "group")


@dataclass(frozen=True)
class LinkResult:
    """What ``link_file`` wrote: the files, the radius used (nm) and how it was chosen, the sigma gate (combined σ;
    0: off) and how far it reached (nm; the radius without a gate), the counts, how crowded the movie is for
    linking at the radius."""

    molecules_path: Path
    groups_path: Path
    radius_nm: float
    radius_source: str
    localizations: int
    molecules: int
    frames_on: dict[str, Any] = field(default_factory=dict)
    sigma_gate: float = 0.0
    reach_nm: float | None = None
    crowding: Crowding | None = None


def linked_paths(path: str | os.PathLike, out_dir: str | os.PathLike) -> tuple[Path, Path]:
    """``DIR/<stem>_link<suffix>`` and ``DIR/<stem>_group<suffix>`` (the suffix of the format they are written in:
    ``io.localizations.written_as``)."""
    path = Path(path)
    suffix = written_as(path)[1] if path.is_file() else path.suffix
    return Path(out_dir) / f"{path.stem}_link{suffix}", Path(out_dir) / f"{path.stem}_group{suffix}"


def check_radius(radius: float | str) -> float | str:
    """``'auto'`` or a radius in nm > 0 (ConfigError otherwise)."""
    if radius == "auto":
        return radius
    try:
        value = float(radius)
    except (TypeError, ValueError):
        raise ConfigError(f"radius must be a number of nm or 'auto', got {radius!r}") from None
    if not np.isfinite(value) or value <= 0:
        raise ConfigError(f"radius must be > 0 nm, got {radius!r}")
    return value


def first_chunk(path: Path, unit: float) -> EmitterTable:
    """The first rows of ``path`` (what the checks and the 'auto' radius look at); StackError when it has no
    rows or no frame column."""
    chunk = next(iter_localizations(path, pixel_size=unit, chunk_rows=WORK_ROWS), None)
    if chunk is None or len(chunk) == 0:
        raise StackError(f"{path}: holds no localizations")
    return chunk


def median_sigma(chunk: EmitterTable, unit: float) -> float | None:
    """The median of the localizations' finite precision (σx and σy together) in ``chunk``, in nm; None where it
    has no σ columns or no finite σ."""
    if "sigma_x" not in chunk or "sigma_y" not in chunk:
        return None
    sigma = np.concatenate([chunk["sigma_x"], chunk["sigma_y"]]).astype(np.float64)
    sigma = sigma[np.isfinite(sigma)]
    return float(np.median(sigma)) * unit if len(sigma) else None


def auto_radius(chunk: EmitterTable, unit: float, path: Path, factor: float = AUTO_FACTOR) -> float:
    """``factor`` x the median of the localizations' precision (σx and σy together) in the first rows, in nm."""
    if "sigma_x" not in chunk or "sigma_y" not in chunk:
        raise ConfigError(f"{path}: --radius auto needs each localization's precision (sigma_x/sigma_y, Picasso's "
                          f"lpx/lpy); this file has none: give --radius in nm")
    median = median_sigma(chunk, unit)
    if median is None:
        raise ConfigError(f"{path}: no finite sigma_x/sigma_y in the first rows; give --radius in nm")
    return factor * median


def sigma_gate_of(radius: float | str, sigma_gate: float | None, chunk: EmitterTable) -> float:
    """The sigma gate a linking uses: ``sigma_gate`` where given, else ``AUTO_SIGMA_GATE`` with the 'auto' radius
    and 0 (off) with a radius in nm. A gate asked for on localizations without σ is a ConfigError (the 'auto'
    radius needs σ too)."""
    gate = (AUTO_SIGMA_GATE if radius == "auto" else 0.0) if sigma_gate is None else float(sigma_gate)
    if not np.isfinite(gate) or gate < 0:
        raise ConfigError(f"--sigma_gate must be >= 0 combined σ (0: off), got {sigma_gate!r}")
    if gate and not ("sigma_x" in chunk and "sigma_y" in chunk):
        raise ConfigError(f"a sigma gate needs each localization's precision (sigma_x/sigma_y, Picasso's lpx/lpy); "
                          f"this file has none: give --sigma_gate 0, got {gate:g}")
    return gate


def link_file(path: str | os.PathLike, out_dir: str | os.PathLike, *, radius: float | str = "auto",
              max_dark: int = 1, correlation: ErrorCorrelation | None = None,
              pixel_size: float | None = None, sigma_gate: float | None = None) -> LinkResult:
    """Link the localizations of ``path`` into ``out_dir`` (module docstring). ``radius`` in nm or ``'auto'``;
    ``sigma_gate`` (combined σ, 0: off; None: on with 'auto') as ``sigma_gate_of`` says; ``correlation`` None:
    ``link.correlation.for_file``'s (the model's that wrote the file)."""
    path, out_dir = Path(path), Path(out_dir)
    radius = check_radius(radius)
    correlation = for_file(path) if correlation is None else correlation
    unit = working_unit(path, pixel_size)  # 1 nm for a file in nm: its nm go back out as they came
    chunk = first_chunk(path, unit)
    radius_nm, source = ((auto_radius(chunk, unit, path), f"auto: {AUTO_FACTOR:g} x the median precision")
                         if radius == "auto" else (float(radius), "given"))
    gate = sigma_gate_of(radius, sigma_gate, chunk)
    reach_nm = AUTO_REACH * radius_nm if gate else radius_nm
    if gate:
        source += f"; beyond it within {gate:g} combined σ, up to {reach_nm:.1f} nm"
    # checks max_dark before anything is written; the files need no pairs
    linker = Linker(radius_nm / unit, max_dark, correlation, sigma_gate=gate, reach=reach_nm / unit, pairs=False)
    mol_path, group_path = linked_paths(path, out_dir)
    if path.resolve() in (mol_path.resolve(), group_path.resolve()):
        raise ConfigError(f"{path}: the linked file would overwrite the input; choose another --out")
    meta = localization_meta(path)
    fmt = written_as(path)[0]
    if fmt == "picasso" and (meta.width is None or meta.height is None):
        raise StackError(f"{path}: the Picasso metadata lacks the frame width/height")
    extras = tuple(c for c in OPTIONAL if c in chunk)
    camera = unit if fmt in IN_PIXELS else meta.pixel_size  # a file in pixels is read in its own
    options: dict[str, Any] = {"pixel_size": camera, "unit": unit, "fmt": fmt,
                               "three_d": bool(np.any(chunk["z"] != 0))}
    if fmt != "csv":
        options.update(width=meta.width, height=meta.height, frames=meta.frames)
    if fmt == "picasso":
        options["info"] = {"Generated by": "decode_mem.link", "Link radius (nm)": radius_nm,
                           "Sigma gate (combined sigma)": gate, "Link reach (nm)": reach_nm,
                           "Max dark frames": max_dark, "Error correlation": correlation.to_dict()}
    out_dir.mkdir(parents=True, exist_ok=True)
    n_locs = n_mol = steps = 0
    on = np.zeros(101, np.int64)
    chance = ChanceNeighbours(radius_nm / unit, radius_nm, max_dark)
    with open_writer_with_columns(mol_path, MOLECULE_COLUMNS, extras=_molecule_extras(extras), **options) as mols, \
            open_writer_with_columns(group_path, ("group",), extras=extras, **options) as groups:

        def write(step: LinkStep) -> None:
            groups.write(step.rows, {"group": step.group})
            m = step.molecules
            mols.write(m.table, {"len": m.length, "n": m.n, "group": m.group,
                                 "photon_rate": m.table["photons"] / np.maximum(m.n, 1)})

        # three stages on their own threads: reading ahead, linking here, writing behind (parquet's and HDF5's
        # encoding and compression release the GIL); each queue holds a few chunks, so memory stays bounded
        with WriteBehind(write, depth=WRITE_DEPTH) as behind:

            def emit(step: LinkStep) -> None:
                nonlocal n_locs, n_mol, on, steps
                behind.put(step)
                n_locs += len(step.rows)
                n_mol += len(step.molecules)
                on += np.bincount(np.minimum(step.molecules.n, 100), minlength=101)
                steps += 1
                if steps % TRIM_EVERY == 0:
                    release_free_heap()

            def counted(tables: Any) -> Any:  # on the reading thread: the linking thread has the most work
                for table in tables:
                    chance.add(table["x"], table["y"], table["frame"])
                    yield table

            for table in prefetch(counted(iter_localizations(path, pixel_size=unit, chunk_rows=WORK_ROWS))):
                for step in linker.feed(table):
                    emit(step)
            emit(linker.finish())
    frames_on = {"mean_localizations_per_molecule": round(n_locs / n_mol, 3) if n_mol else None,
                 "molecules_with_1": int(on[1]), "molecules_with_2_or_more": int(on[2:].sum())}
    crowding = chance.result()
    if crowding.crowded:
        warnings.warn(crowding.warning(path), stacklevel=2)
    return LinkResult(mol_path, group_path, radius_nm, source, n_locs, n_mol, frames_on, gate, reach_nm, crowding)


def _molecule_extras(extras: tuple[str, ...]) -> tuple[str, ...]:
    """The optional columns a molecule has: prob (the largest) and the combined σ (sigma_photons is not
    combined: photons are summed, their errors correlate in ways not measured)."""
    return tuple(e for e in extras if e != "sigma_photons")
