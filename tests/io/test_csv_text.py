"""The columnar CSV text is byte for byte what ``np.savetxt`` (the writer before it) writes."""

from __future__ import annotations

import io

import numpy as np
import pytest
from io_tables import random_table

from decode_mem.io.csv_text import csv_lines
from decode_mem.io.table import EmitterTable
from decode_mem.io.thunderstorm import BASE_COLUMNS, EXTRA_COLUMNS, ThunderstormWriter, thunderstorm_columns


def savetxt(columns: list[np.ndarray], formats: list[str]) -> bytes:
    """The reference: the ThunderSTORM writer's text before the columnar writer (one Python ``%`` per row)."""
    out = io.StringIO()
    np.savetxt(out, np.column_stack(columns), fmt=formats, delimiter=",")
    return out.getvalue().encode()


def columnar(columns: list[np.ndarray], formats: list[str], rows_per_block: int = 16_384) -> bytes:
    return b"".join(csv_lines(columns, formats, rows_per_block))


EDGES = np.array([
    0.0, -0.0, np.nan, np.inf, -np.inf, 1e-5, -1e-5, 5e-5, -5e-5, 1.5e-4, 1.03125, -1.03125, 2.5e-5, 0.5, -0.5,
    9.99995, 99999.99995, 0.99999996, 1.0, 10.0, 0.1, 0.01, 0.001, 1e-4, 9.9999999e-5, 1e5, 99999.95, 123456.7,
    5e-324, 1e300, -1e300, 4.5e11, 2.0**52 / 1e4, 12345678901.2345, 0.000123456789, 1e-4 * (1 - 1e-16)])


def ties(rng: np.random.Generator, n: int, decimals: int) -> np.ndarray:
    """Values whose product with 10**decimals is exactly k + 0.5 when exact, and their neighbours: the
    exact ties (to even) and the products that a rounding moves onto or off a tie."""
    k = rng.integers(0, 10**7, n).astype(np.float64)
    exact = (k + 0.5) / 2.0**decimals / (5.0**decimals)  # inexact division: near a tie, on either side
    dyadic = (k + 0.5) * 2.0 ** -rng.integers(1, 12, n)  # x.5 / 2**m: exact ties for m <= decimals
    out = np.concatenate([exact, dyadic, np.nextafter(exact, 0), np.nextafter(exact, np.inf),
                          np.nextafter(dyadic, 0), np.nextafter(dyadic, np.inf)])
    return out * np.where(rng.random(len(out)) < 0.3, -1, 1)


@pytest.mark.parametrize(("rows_per_block", "n"), [(7, 300), (16_384, 20_000)])
def test_every_format_matches_savetxt_byte_for_byte(rows_per_block: int, n: int) -> None:
    """Edges, exact ties and their neighbours, random values of every magnitude; in blocks of 7 rows too."""
    rng = np.random.default_rng(3)
    def column(decimals: int) -> np.ndarray:
        v = np.concatenate([EDGES, ties(rng, n // 20, decimals), rng.uniform(-1e3, 4e5, n), rng.normal(0, 1, n),
                            rng.uniform(0, 1, n).astype(np.float32).astype(np.float64),  # the table's float32
                            (rng.uniform(0, 255, n).astype(np.float32) + 0.5) * 100.0,  # x [nm]: many exact ties
                            rng.uniform(0, 1.2, n), 10.0 ** rng.uniform(-6, 7, n)])
        return rng.permutation(v)
    fixed, general = column(4), column(5)
    m = len(fixed)
    ints = [np.arange(m, dtype=np.int64) - 5, rng.integers(-3, 10**15, m)]
    formats = ["%d", "%d", "%.4f", "%.6g", "%.4f", "%.6g"]
    columns = [*ints, fixed, general, general[::-1].copy(), fixed[::-1].copy()]
    assert columnar(columns, formats, rows_per_block) == savetxt(columns, formats)


def test_one_row_and_none() -> None:
    one = [np.array([7]), np.array([-0.00004]), np.array([0.99999949])]
    assert columnar(one, ["%d", "%.4f", "%.6g"]) == b"7,-0.0000,0.999999\n"
    assert columnar([np.zeros(0, np.int64)], ["%d"]) == b""


def test_refuses_what_it_cannot_write() -> None:
    with pytest.raises(ValueError, match="not supported"):
        columnar([np.zeros(3)], ["%.3e"])
    with pytest.raises(ValueError, match="integer column"):
        columnar([np.zeros(3)], ["%d"])
    with pytest.raises(ValueError, match="differ in length"):
        columnar([np.zeros(3), np.zeros(2)], ["%.4f", "%.4f"])


def old_writer_text(tables: list[EmitterTable], pixel_size: float, extras: tuple[str, ...]) -> bytes:
    """What ``ThunderstormWriter`` wrote before (header, then ``np.savetxt`` of each table's columns)."""
    header = list(BASE_COLUMNS) + [EXTRA_COLUMNS[e][0] for e in extras]
    formats = ["%d", "%d"] + ["%.4f"] * (len(BASE_COLUMNS) - 2) + ["%.6g" if e == "prob" else "%.4f" for e in extras]
    text, first = (",".join(f'"{h}"' for h in header) + "\n").encode(), 1
    for table in tables:
        if len(table):
            text += savetxt(list(thunderstorm_columns(table, pixel_size, extras, first).values()), formats)
            first += len(table)
    return text


@pytest.mark.parametrize("extras", [(), ("prob", "sigma_x", "sigma_y", "sigma_photons"),
                                    ("prob", "sigma_x", "sigma_y", "sigma_z", "sigma_photons")])
def test_thunderstorm_file_is_the_old_writers_byte_for_byte(tmp_path, extras: tuple[str, ...]) -> None:
    rng = np.random.default_rng(5)
    def block(n: int, seed: int) -> EmitterTable:
        t = random_table(n, seed, frames=2000, width=2047, height=2047)
        more = {"prob": np.minimum(rng.uniform(0.3, 1.3, n), 1.0), "sigma_x": rng.uniform(0.01, 0.4, n),
                "sigma_y": rng.uniform(0.01, 0.4, n), "sigma_photons": rng.uniform(5, 300, n)}
        if "sigma_z" in extras:
            more["sigma_z"] = rng.uniform(5, 80, n)
        if not extras:  # no sigma columns: the uncertainty is NaN, written as "nan"
            more = {}
        return EmitterTable({**t.columns, **more})
    tables = [block(3000, 1), EmitterTable.empty(), block(1, 2), block(5000, 3)]
    path = tmp_path / "locs.csv"
    with ThunderstormWriter(path, pixel_size=160.0, extras=extras) as writer:
        for table in tables:
            writer.write(table)
    assert path.read_bytes() == old_writer_text(tables, 160.0, extras)
