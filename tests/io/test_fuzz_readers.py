"""Every reader fuzzed (``tests/fuzz_readers.py``): seeded mutations of real seed files, each read in a child process
with a memory and a time limit, must give a read or one decode_mem error naming the file; every defect the fuzzer
found is a regression input in ``tests/data/fuzz`` (its README says what each is); and the harness tells each kind
of defect apart. ``benchmarks/bench_fuzz.py`` runs ten thousand and more of the same cases."""

from __future__ import annotations

import re

import fuzz_readers as fr
import pytest

CASES_PER_READER = 10  # a few hundred cases in all: ~40 s on 2 busy cores, the fork server's start included

pytestmark = [pytest.mark.serial, pytest.mark.slow]  # two children at a time, each against a wall-clock limit


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return fr.build_seeds(tmp_path_factory.mktemp("seeds"))


@pytest.fixture(scope="module")
def server():
    """One fork server for the module (it imports the readers' libraries once: ~10 s on a busy machine)."""
    with fr.Server(jobs=2) as running:
        yield running


def defects_text(results: list[fr.Result]) -> str:
    return "\n".join(f"{r.case.id} {r.outcome}: {r.message[:200]} [{r.where}] after {'; '.join(r.mutations)}"
                     for r in results if r.defect)


def test_every_reader_read_whole_or_refused_in_one_line_naming_the_file(seeds, server, tmp_path):
    cases = fr.draw_cases(CASES_PER_READER * len(seeds), seeds=seeds)
    results = fr.run_cases(cases, seeds, tmp_path, server=server)
    assert set(fr.READERS) - set(seeds) <= {"nd2", "czi", "lif", "sif", "ndtiff"}  # only an extra's may be absent
    assert len(results) >= 200 and {r.case.reader for r in results} == set(seeds)
    assert not any(r.defect for r in results), defects_text(results)
    outcomes = {r.outcome for r in results}
    assert outcomes == {"read", "error"}  # the mutations both spoil files and leave some readable


def test_every_defect_the_fuzzer_found_stays_mended(server, tmp_path):
    entries, cases, seeds = fr.regression_cases()
    assert len(entries) >= 20 and len({e["name"] for e in entries}) == len(entries)
    assert (fr.FUZZ_DATA / "README.md").read_text() == fr.readme_text()  # each input said what it is
    available = [i for i, e in enumerate(entries) if fr.reader(e["reader"]).available()]
    results = fr.run_cases([cases[i] for i in available], seeds, tmp_path, server=server)
    wrong = [(entries[i]["name"], r.outcome, r.message[:300]) for i, r in zip(available, results, strict=True)
             if r.outcome != entries[i]["expect"] or not re.search(entries[i]["match"], r.message)]
    assert not wrong


def test_the_harness_tells_each_outcome_apart(server, tmp_path):
    """Readers that misbehave on purpose: a hang, an allocation the limit refuses, a segfault, a TypeError, an error
    without the file's name, a clean error, a read."""
    probe_seeds = fr.build_seeds(tmp_path / "seeds", list(fr.PROBES))
    cases = [fr.Case(name, 0, 0, ()) for name in fr.PROBES]
    results = fr.run_cases(cases, probe_seeds, tmp_path / "cases", time_limit=3.0, server=server)
    assert {r.case.reader: r.outcome for r in results} == {
        "probe read": "read", "probe error": "error", "probe unnamed": "unnamed", "probe unclean": "unclean",
        "probe hang": "hang", "probe crash": "crash", "probe oom": "oom"}
