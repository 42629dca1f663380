"""light_verdict: the light model is the CPU default only where all three bars pass on the files measured; a light
model that finds more than Picasso but places the emitters both found less precisely on one variant is kept off,
and the summary says where; one whose RMSE over its own matches is above Picasso's only because it also finds dim
emitters passes."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def _records(light_rmse: dict[str, float] | None = None, only: int | None = None, own_rmse: float = 15.0,
             common: bool = True) -> tuple[dict, dict]:
    """Records where the light model's RMSE on the emitters both found is ``light_rmse`` (by variant; else 15 nm)
    against Picasso's 20, and over its own matches ``own_rmse`` against Picasso's 20."""
    from bench_generalize import COMMON, VARIANTS

    cpu_default = {"model_sha256": "L", "compare_model_sha256": "S", "cpu": "Some CPU, 2 cores: AVX2",
                   "rows": [{"side": 256, "density": 1.0,
                             "decode_mem": [{"jaccard": 0.895, "frames_per_s": 60.0}],
                             "compare": [{"jaccard": 0.91, "frames_per_s": 20.0}]}]}
    names = list(VARIANTS)[:only]
    rows = [{"name": n, "light": {"jaccard": 0.88, "rmse_lat": own_rmse},
             "picasso": {"jaccard": 0.78, "rmse_lat": 20.0}} for n in names]
    for r in rows if common else ():
        r["light"][COMMON] = {"n": 900, "rmse_lat": (light_rmse or {}).get(r["name"], 15.0), "picasso_rmse_lat": 20.0}
    return cpu_default, {"models": {"light": {"sha256": "L"}}, "rows": rows}


def test_every_bar_passed_makes_it_the_cpu_default_and_says_its_numbers() -> None:
    from light_verdict import PRECISE, summary, verdict

    v = verdict(*_records(), "L", "S")
    assert v["cpu_default"] and [c["passed"] for c in v["checks"]] == [True, True, True]
    precise = next(c for c in v["checks"] if c["check"] == PRECISE)
    assert precise["value"] == -5.0
    assert summary(v) == ("3.00x the small model's frames/s (Some CPU, 2 cores), -0.015 Jaccard against it at 1/µm², "
                          "+0.100 or more against tuned Picasso on 10 physics variants, lateral RMSE 5.0 nm or more "
                          "below Picasso's on the emitters both found")


def test_less_precise_than_picasso_on_one_variant_keeps_it_off_and_names_the_variant() -> None:
    from bench_generalize import VARIANTS
    from light_verdict import PRECISE, summary, verdict

    worst = list(VARIANTS)[3]
    v = verdict(*_records({worst: 22.5}), "L", "S")
    assert not v["cpu_default"]
    precise = next(c for c in v["checks"] if c["check"] == PRECISE)
    assert not precise["passed"] and precise["value"] == 2.5 and precise["variants"][worst] == 2.5
    assert summary(v).endswith(f"lateral RMSE 2.5 nm above Picasso's on the emitters both found on {worst}")


def test_an_rmse_above_picassos_over_its_own_matches_alone_does_not_keep_it_off() -> None:
    from light_verdict import PRECISE, verdict

    v = verdict(*_records(own_rmse=23.0), "L", "S")  # more dim emitters found: 3 nm above over its own matches
    precise = next(c for c in v["checks"] if c["check"] == PRECISE)
    assert v["cpu_default"] and precise["value"] == -5.0 and set(precise["over_own_matches"].values()) == {3.0}


def test_a_generalize_record_without_the_emitters_both_found_passes_no_precision() -> None:
    from light_verdict import PRECISE, summary, verdict

    v = verdict(*_records(common=False), "L", "S")
    precise = next(c for c in v["checks"] if c["check"] == PRECISE)
    assert not v["cpu_default"] and not precise["passed"] and precise["value"] is None
    assert summary(v) == "no RMSE on the emitters both found (a generalize.json from before it was measured)"


def test_a_run_of_some_variants_or_of_another_file_passes_nothing() -> None:
    from light_verdict import summary, verdict

    v = verdict(*_records(only=3), "L", "S")  # bench_generalize --only: not every variant
    assert not v["cpu_default"] and [c["passed"] for c in v["checks"]] == [True, False, False]
    v = verdict(*_records(), "another", "S")
    assert not v["cpu_default"] and not any(c["passed"] for c in v["checks"])
    assert summary(v) == ("measured other files than the shipped light and small models; "
                          "measured another file than the shipped light model")
