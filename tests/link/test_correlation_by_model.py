"""Each shipped model's own error correlation: chosen by the model's file (``for_model``), by the run summary beside
a localization file (``for_file``: what ``link`` and ``evaluate --no_truth`` take by default), and by ``infer``
for the model it ran; a model whose correlation was not measured gets the small shipped model's, saying so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import tifffile

from decode_mem.evaluate.__main__ import main as evaluate_main
from decode_mem.io.localizations import write_localizations
from decode_mem.io.table import EmitterTable
from decode_mem.link import DECODE_MEM, DECODE_MEM_LIGHT, DECODE_MEM_WIDE, for_file, for_model
from decode_mem.link.__main__ import main as link_main
from decode_mem.link.correlation import MEASURED
from decode_mem.model.checkpoint import SHIPPED_MODEL
from decode_mem.model.choice import SHIPPED_LIGHT_MODEL, SHIPPED_WIDE_MODEL

PX = 100.0


def blinks(n_sites: int = 300, frames_on: int = 4, seed: int = 0) -> EmitterTable:
    """Sites in a 40 x 40 px field, each on for ``frames_on`` frames from a random start, 8 nm errors."""
    rng = np.random.default_rng(seed)
    sx, sy = rng.uniform(1, 39, n_sites), rng.uniform(1, 39, n_sites)
    frame = (rng.integers(0, 2000, n_sites)[:, None] + np.arange(frames_on)).ravel()
    x = np.repeat(sx, frames_on) + rng.normal(0, 0.08, n_sites * frames_on)
    y = np.repeat(sy, frames_on) + rng.normal(0, 0.08, n_sites * frames_on)
    n = len(frame)
    return EmitterTable.from_arrays(frame=frame, x=x, y=y, photons=np.full(n, 2000.0), sigma_x=np.full(n, 0.08),
                                    sigma_y=np.full(n, 0.08)).sorted_by_frame()


def summary(folder: Path, stem: str, model: str) -> None:
    """A run summary as ``infer`` writes it (only what the choice reads)."""
    (folder / f"{stem}.json").write_text(json.dumps({"model_choice": {"path": model, "given": False, "why": "-"}}))


def test_the_two_shipped_models_differ_and_another_model_gets_the_small_ones_saying_so() -> None:
    assert (DECODE_MEM_WIDE.by_lag, DECODE_MEM_WIDE.beyond) != (DECODE_MEM.by_lag, DECODE_MEM.beyond)
    # the shipped files' names, kept apart
    assert set(MEASURED) == {SHIPPED_MODEL.name, SHIPPED_WIDE_MODEL.name, SHIPPED_LIGHT_MODEL.name}
    assert for_model(SHIPPED_LIGHT_MODEL) is DECODE_MEM_LIGHT
    assert for_model(None) is DECODE_MEM and for_model(SHIPPED_MODEL) is DECODE_MEM
    assert for_model(SHIPPED_WIDE_MODEL) is DECODE_MEM_WIDE
    assert for_model("/anywhere/default_2d_wide.pt") is DECODE_MEM_WIDE
    mine = for_model("runs/fit/model.pt")
    assert (mine.by_lag, mine.beyond) == (DECODE_MEM.by_lag, DECODE_MEM.beyond)
    assert mine.source.startswith("not measured for model.pt")


def test_a_file_takes_the_model_its_run_summary_names(tmp_path: Path) -> None:
    summary(tmp_path, "m", "/x/default_2d_wide.pt")
    assert for_file(tmp_path / "m.csv") is DECODE_MEM_WIDE
    assert for_file(tmp_path / "m_undrift.parquet") is DECODE_MEM_WIDE  # drift-corrected from that run
    assert for_file(tmp_path / "movie.csv") is DECODE_MEM  # "m" is not this file's run
    summary(tmp_path, "m_undrift", "/x/default_2d.pt")  # the longest matching stem is the file's own run
    assert for_file(tmp_path / "m_undrift.csv") is DECODE_MEM
    (tmp_path / "broken.json").write_text("{not json")
    assert for_file(tmp_path / "broken.csv") is DECODE_MEM
    assert for_file(tmp_path / "alone" / "x.csv") is DECODE_MEM  # no folder, no summary


def test_link_and_no_truth_clis_take_the_runs_model_by_default_and_a_named_one_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "m.hdf5"  # Picasso's: its .yaml records the linking's correlation
    write_localizations(blinks(), path, pixel_size=PX, width=40, height=40)
    summary(tmp_path, "m", "/x/default_2d_wide.pt")
    assert evaluate_main([str(path), "--no_truth", "--out", str(tmp_path / "q"), "--quiet"]) == 0
    rho = json.loads((tmp_path / "q" / "m_quality.json").read_text())["error_correlation"]
    assert rho["beyond"] == DECODE_MEM_WIDE.beyond and rho["source"] == DECODE_MEM_WIDE.source
    assert evaluate_main([str(path), "--no_truth", "--out", str(tmp_path / "q2"), "--quiet",
                          "--correlation", "decode_mem"]) == 0
    rho = json.loads((tmp_path / "q2" / "m_quality.json").read_text())["error_correlation"]
    assert rho["beyond"] == DECODE_MEM.beyond and rho["source"] == DECODE_MEM.source
    assert link_main([str(path), "--out", str(tmp_path / "l"), "--quiet"]) == 0
    meta = next((tmp_path / "l").glob("*.yaml")).read_text()
    assert f"beyond: {DECODE_MEM_WIDE.beyond}" in meta and "default_2d_wide" in meta


def test_infer_links_and_assesses_with_the_correlation_of_the_model_it_ran(tmp_path: Path) -> None:
    from decode_mem.infer import run_inference
    from decode_mem.infer.config import InferConfig

    wide = tmp_path / "default_2d_wide.pt"  # the small model under the wide one's name: only the name decides
    shutil.copy(SHIPPED_MODEL, wide)
    frames = tifffile.imread(SHIPPED_MODEL.parents[1] / "sample" / "stack.tif")[:30, :64, :64]  # emitters to link
    tifffile.imwrite(tmp_path / "m.tif", frames)
    run_inference(InferConfig(inputs=(str(tmp_path / "m.tif"),), out=str(tmp_path / "out"), device="cpu",
                              model=str(wide), chunk_size=64, batch_size=4, quality=True))
    quality = json.loads((tmp_path / "out" / "m.json").read_text())["quality"]
    assert quality["error_correlation"]["source"] == DECODE_MEM_WIDE.source


def test_each_shipped_models_unseen_error_factor_is_the_one_its_benchmark_measured() -> None:
    """1 / the median of RMS σ x σ scale over the true RMSE on the benchmark movies not held out or new and not
    crowded for linking, from the record each model's report was written from; a model made by ``fit`` takes the
    small model's."""
    results = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    for name, model in (("postprocess.json", DECODE_MEM), ("postprocess_wide.json", DECODE_MEM_WIDE)):
        records = json.loads((results / name).read_text())["records"]
        ratios = [r["stated"]["sigma_precision_nm"] * r["stated"]["sigma_scale"]
                  / np.sqrt(np.mean(np.square(r["rmse"])))
                  for r in records if not r["case"].startswith(("held out", "new"))
                  and r["stated"]["crowded_for_linking"] is False]
        assert len(ratios) == 5
        assert abs(model.unseen_error_factor - 1 / np.median(ratios)) < 0.01, name
        assert records[0]["stated"]["unseen_error_factor"] == model.unseen_error_factor  # the record stated with it
    assert for_model("runs/fit/model.pt").unseen_error_factor == DECODE_MEM.unseen_error_factor
