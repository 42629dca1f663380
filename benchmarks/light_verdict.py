"""Whether the light model is the CPU default: issue 77's two bars and a third, read from the measured results,
written beside the model for ``decode_mem.model.choice`` to read.

    python benchmarks/light_verdict.py    # reads benchmarks/results/cpu_default_light.json and generalize.json
                                          # writes data/models/default_2d_light_cpu.json
    python benchmarks/light_verdict.py --light CANDIDATE.pt --cpu-default ... --generalize ... --out VERDICT.json
                                          # a candidate's records: the verdict it would get if it were shipped

The bars (issue 77): on ``bench_cpu_default``'s 256² movie at 1 emitter/µm², the light model's Jaccard within
``SMALL_GAP`` of the small model's (``--model`` the light one, ``--compare-model`` the small one, same runs); on every
physics variant of ``bench_generalize``, the light model ahead of tuned Picasso by at least ``bench_generalize.
LIGHT_AHEAD``. A third bar where the issue is silent: on every variant, its lateral RMSE at or below tuned Picasso's
on the emitters both found (a model that finds more molecules but places them less precisely than Picasso is not
what a user switching from it expects; on the emitters both found, because an RMSE over each method's own matches
also counts the dim emitters only the model finds, which Picasso's does not: ``evaluate.common_rmse_lat``).
Each results file names the SHA-256 of the files it measured: the verdict holds for those files only,
and ``infer`` takes the light model by itself only while the shipped file is that one (``model.choice``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench_generalize import COMMON, LIGHT_AHEAD, VARIANTS
from command_line import command_line

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SMALL_GAP = 0.02  # issue 77: the light model within this Jaccard of the small one at 1 /µm²
NEAR_SMALL = f"within {SMALL_GAP} Jaccard of the small model at 1/µm²"  # the checks, as the verdict names them
AHEAD = f"ahead of tuned Picasso by >= {LIGHT_AHEAD} Jaccard on every physics variant"
PRECISE = "lateral RMSE at or below tuned Picasso's on the emitters both found, on every physics variant"


def verdict(cpu_default: dict, generalize: dict, light_sha: str, small_sha: str,
            light_name: str = "default_2d_light.pt") -> dict:
    """The verdict (a JSON-able dict) from a ``bench_cpu_default`` record and a ``bench_generalize`` record."""
    checks = []
    row = next((r for r in cpu_default.get("rows", []) if r["side"] == 256 and r["density"] == 1.0), None)
    same = cpu_default.get("model_sha256") == light_sha and cpu_default.get("compare_model_sha256") == small_sha
    if row is None or not row.get("compare") or not row.get("decode_mem") or not same:
        why = "no 256², 1/µm² row beside the small model" if row is None or not row.get("compare") else \
            "measured other files than the shipped light and small models"
        checks.append({"check": NEAR_SMALL, "passed": False, "value": None, "why": why})
    else:
        light, small = row["decode_mem"][0]["jaccard"], row["compare"][0]["jaccard"]  # every run gives the same
        speed = max(r["frames_per_s"] for r in row["decode_mem"]) / max(r["frames_per_s"] for r in row["compare"])
        checks.append({"check": NEAR_SMALL, "passed": light - small >= -SMALL_GAP, "value": round(light - small, 4),
                       "light": round(light, 4), "small": round(small, 4), "speed_ratio": round(speed, 2),
                       "cpu": cpu_default.get("cpu", "n/a")})
    rows = [r for r in generalize.get("rows", []) if "light" in r and "picasso" in r]
    measured = generalize.get("models", {}).get("light", {}).get("sha256")
    if not rows or measured != light_sha:
        why = "no variant with the light model and Picasso" if not rows else \
            "measured another file than the shipped light model"
        checks += [{"check": name, "passed": False, "value": None, "why": why} for name in (AHEAD, PRECISE)]
    else:
        ahead = {r["name"]: round(r["light"]["jaccard"] - r["picasso"]["jaccard"], 4) for r in rows}
        every = set(ahead) == set(VARIANTS)  # a run of some variants only (--only) passes nothing
        checks.append({"check": AHEAD, "passed": every and all(v >= LIGHT_AHEAD for v in ahead.values()),
                       "value": min(ahead.values()), "variants": ahead})
        if not all(COMMON in r["light"] for r in rows):
            checks.append({"check": PRECISE, "passed": False, "value": None,
                           "why": "no RMSE on the emitters both found (a generalize.json from before it was measured)"})
        else:  # nm the light model's lateral RMSE lies above Picasso's on the emitters both found (negative: below)
            above = {r["name"]: round(r["light"][COMMON]["rmse_lat"] - r["light"][COMMON]["picasso_rmse_lat"], 2)
                     for r in rows}
            own = {r["name"]: round(r["light"]["rmse_lat"] - r["picasso"]["rmse_lat"], 2) for r in rows}
            checks.append({"check": PRECISE, "passed": every and all(v <= 0 for v in above.values()),
                           "value": max(above.values()), "variants": above,
                           "over_own_matches": own})  # for the record: each method's RMSE over its own matches
    return {"model": light_name, "sha256": light_sha, "small_sha256": small_sha,
            "cpu_default": all(c["passed"] for c in checks), "checks": checks}


def summary(v: dict) -> str:
    """One line of what the verdict says (``model.choice`` shows it as its reason)."""
    gap, ahead, precise = v["checks"]
    if any(c["value"] is None for c in (gap, ahead, precise)):
        return "; ".join(dict.fromkeys(c["why"] for c in (gap, ahead, precise) if c["value"] is None))
    cpu = gap["cpu"].split(":")[0]  # e.g. 'AMD EPYC, 2 cores'
    worst = max(precise["variants"], key=precise["variants"].get)  # precise["value"] is its excess
    rmse = (f"lateral RMSE {-precise['value']:.1f} nm or more below Picasso's on the emitters both found"
            if precise["passed"] else
            f"lateral RMSE {precise['value']:.1f} nm above Picasso's on the emitters both found on {worst}")
    return (f"{gap['speed_ratio']:.2f}x the small model's frames/s ({cpu}), {gap['value']:+.3f} Jaccard against it "
            f"at 1/µm², {ahead['value']:+.3f} or more against tuned Picasso on {len(ahead['variants'])} physics "
            f"variants, {rmse}")


def main(argv: list[str] | None = None) -> int:
    from decode_mem.io.atomic import atomic_output
    from decode_mem.model.choice import LIGHT_VERDICT, SHIPPED_LIGHT_MODEL, SHIPPED_MODEL
    from decode_mem.model.trained import file_sha256

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-default", default=str(RESULTS / "cpu_default_light.json"))
    p.add_argument("--generalize", default=str(RESULTS / "generalize.json"))
    p.add_argument("--out", default=str(LIGHT_VERDICT))
    p.add_argument("--light", default=str(SHIPPED_LIGHT_MODEL),
                   help="the light model the records must have measured (default: the shipped one)")
    args = p.parse_args(argv)
    v = verdict(json.loads(Path(args.cpu_default).read_text()), json.loads(Path(args.generalize).read_text()),
                file_sha256(args.light), file_sha256(SHIPPED_MODEL), Path(args.light).name)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    v.update(summary=summary(v), command=command_line(), commit=commit.stdout.strip() or "n/a",
             written=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
             results=[str(Path(f).resolve().relative_to(ROOT)) if Path(f).resolve().is_relative_to(ROOT) else str(f)
                      for f in (args.cpu_default, args.generalize)])
    with atomic_output(Path(args.out)) as tmp:
        tmp.write_text(json.dumps(v, indent=1) + "\n")
    print(f"{args.out}: cpu_default {v['cpu_default']} ({v['summary']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
