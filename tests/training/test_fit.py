"""The training loop end to end: outputs, resume == uninterrupted, chunking, checkpoints, the CLI."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from decode_mem.errors import CheckpointError
from decode_mem.model.checkpoint import load_model
from decode_mem.model.net import DecodeNet
from decode_mem.train.__main__ import main
from decode_mem.train.config import TrainConfig, load_train_config
from decode_mem.train.loop import fit
from decode_mem.train.observers import train_observed


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_model(path).net.state_dict()


def test_resume_gives_the_same_model_as_an_uninterrupted_run(tiny_cfg: TrainConfig, tmp_path: Path) -> None:
    straight = fit(replace(tiny_cfg, out=str(tmp_path / "straight")))
    first = fit(replace(tiny_cfg, out=str(tmp_path / "resumed"), steps=2))
    assert load_model(first).step == 2
    trained: list[int] = []
    resumed = fit(replace(tiny_cfg, out=str(tmp_path / "resumed"), resume=True),
                  on_step=lambda step, row: trained.append(step))
    assert trained == [3, 4]  # continued after the checkpoint: a restart (same data, same weights) trains 1-4
    a, b = _weights(straight), _weights(resumed)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    with open(tmp_path / "resumed" / "train_log.csv") as fh:
        steps = [int(r["step"]) for r in csv.DictReader(fh)]
    assert steps == [1, 2, 3, 4]


def test_chunking_feeds_the_network_only_chunk_sized_crops(tiny_cfg: TrainConfig, monkeypatch) -> None:
    seen: list[tuple[int, int]] = []
    forward = DecodeNet.forward

    def spy(self, x, **kwargs):
        # the memory planner's trace runs the network on fake tensors (only when its disk cache lacks the shape,
        # so counting it would make this test depend on the tests run before it): count the real calls only
        if self.training and not isinstance(x, FakeTensor):
            seen.append(tuple(x.shape[-2:]))
        return forward(self, x, **kwargs)

    monkeypatch.setattr(DecodeNet, "forward", spy)
    cfg = replace(tiny_cfg, steps=1, use_chunking=True, crop_size=16,
                  simulation=replace(tiny_cfg.simulation, frame_size=(40, 40)))
    fit(cfg)
    assert len(seen) == 9  # 3 x 3 crops of a 40 x 40 frame, one optimizer step
    assert max(max(s) for s in seen) == 16


def test_fit_writes_model_logs_and_plots(tiny_cfg: TrainConfig) -> None:
    steps = []
    model_path = train_observed(replace(tiny_cfg, memory_tracking=True))
    fit(replace(tiny_cfg, out=str(Path(tiny_cfg.out).with_name("hooked"))), on_step=lambda s, row: steps.append(s))
    assert steps == [1, 2, 3, 4]  # the observer hook sees every optimizer step
    out = Path(tiny_cfg.out)
    for name in ("model.pt", "checkpoint.pt", "train_log.csv", "training.png", "memory.csv", "memory.png"):
        assert (out / name).stat().st_size > 0, name
    model = load_model(model_path)
    assert model.pixel_size == tiny_cfg.simulation.camera.pixel_size
    assert model.receptive_field > 0 and not model.net.training
    with open(out / "train_log.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert rows[-1]["jaccard"] != "" and float(rows[-1]["count"]) > 0


def test_corrupt_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match=r"model\.pt"):
        load_model(bad)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_model(tmp_path / "missing.pt")


def test_truncated_checkpoint_is_a_clear_error(tiny_cfg: TrainConfig, tmp_path: Path) -> None:
    path = fit(replace(tiny_cfg, steps=1))
    data = path.read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"cut\.pt"):
        load_model(cut)


def test_resume_with_a_different_model_is_refused(tiny_cfg: TrainConfig) -> None:
    fit(replace(tiny_cfg, steps=1))
    other = replace(tiny_cfg, resume=True, model=replace(tiny_cfg.model, features=4))
    with pytest.raises(CheckpointError, match="'model' differs"):
        fit(other)


def test_resume_with_another_simulation_names_only_what_differs(tiny_cfg: TrainConfig) -> None:
    fit(replace(tiny_cfg, steps=1))
    other = replace(tiny_cfg, resume=True, simulation=replace(tiny_cfg.simulation, photons_mean=3000.0))
    with pytest.raises(CheckpointError) as err:
        fit(other)
    message = str(err.value)
    assert "'simulation' differs from the checkpoint's (photons_mean: 5000.0 there, 3000.0 now)" in message
    assert "frame_size" not in message and "Fix: " in message  # the one entry that differs, not the section


def test_cli_smoke_run_writes_memory_csv_and_png(tmp_path: Path, capsys) -> None:
    out = tmp_path / "cli"
    rc = main(["--preset", "tiny", "--steps", "2", "--batch_size", "2", "--frame_size", "16", "16",
               "--val_every", "2", "--out", str(out), "--memory_tracking", "--memory_log_file",
               str(tmp_path / "mem.csv"), "--use_chunking", "--crop_size", "8", "--quiet"])
    assert rc == 0
    assert (tmp_path / "mem.csv").read_text().startswith("elapsed_s,")
    assert (out / "memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out == ""  # --quiet: no progress bar, no summary line


def test_cli_reports_a_corrupt_checkpoint_on_resume(tmp_path: Path, capsys) -> None:
    out = tmp_path / "cli"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes(b"\x00" * 100)
    rc = main(["--preset", "tiny", "--steps", "2", "--frame_size", "16", "16", "--out", str(out), "--resume",
               "--quiet"])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "checkpoint.pt" in err


def test_yaml_config_is_strict(tmp_path: Path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text("steps: 3\nchunksize: 64\n")
    with pytest.raises(Exception, match="unknown key 'chunksize' \\(did you mean 'crop_size'\\?\\)"):
        load_train_config(path)
    path.write_text("steps: 3\nmodel: {depth: 1, features: 4, inter_features: 4}\nsimulation: {frame_size: [8, 8]}\n")
    cfg = load_train_config(path)
    assert cfg.steps == 3 and cfg.model.depth == 1 and cfg.simulation.frame_size == (8, 8)


def assert_card_opens_with_its_envelope(card: str, envelope: dict) -> None:
    """A microscopist reads a card top down: the data the model covers first, then how well it does, then how it
    was made (steps, time, hardware, config)."""
    order = [card.index(h) for h in ("## Envelope", "## How well it does", "## How it was made", "## Training config")]
    assert order == sorted(order), order
    assert card.index("## Envelope") < card.index("optimizer steps") and card.index("## Envelope") < card.index(
        "Trained with")
    for key, label, unit in (("pixel_size_nm", "camera pixel", "nm"), ("psf_sigma_px", "PSF width (σ)", "px")):
        lo, hi = envelope[key]
        assert f"| {label} | {lo:g}{'' if lo == hi else f'–{hi:g}'} {unit} |" in card, (key, card[:1200])


def test_export_writes_an_inference_checkpoint_and_a_model_card(tiny_cfg: TrainConfig, tmp_path: Path) -> None:
    from decode_mem.export.card import export_model

    fit(replace(tiny_cfg, steps=2))
    model_path, card_path = export_model(Path(tiny_cfg.out), tmp_path / "models" / "m", n_eval=4,
                                         frame_size=(16, 16))
    model = load_model(model_path)
    assert model.step == 2
    assert "train_state" not in torch.load(model_path, weights_only=True) or \
        torch.load(model_path, weights_only=True)["train_state"] is None
    card = card_path.read_text()
    assert "| 0.2 |" in card and "| 2 |" in card and "optimizer steps: 2" in card
    assert "started from" not in card
    assert_card_opens_with_its_envelope(card, model.envelope)
    # a fine-tuning run's card names the model it started from and that model's steps
    tuned = Path(tiny_cfg.out).with_name("tuned")
    fit(replace(tiny_cfg, out=str(tuned), steps=3, init_from=str(model_path)))
    card = export_model(tuned, tmp_path / "models" / "t", n_eval=4, frame_size=(16, 16))[1].read_text()
    assert f"started from the weights of `{model_path}` (2 steps of its own run)" in card
    assert "optimizer steps: 3" in card


def test_time_budget_stops_early_and_fine_tuning_starts_from_the_weights(tiny_cfg: TrainConfig) -> None:
    first = fit(replace(tiny_cfg, steps=2))
    base = load_model(first).net.state_dict()
    seen = []
    tuned = fit(replace(tiny_cfg, out=str(Path(tiny_cfg.out).with_name("tuned")), steps=1000, max_minutes=1e-4,
                        init_from=str(first)), on_step=lambda s, row: seen.append(s))
    assert len(seen) == 1  # the budget (6 ms) ran out after the first step, which always completes
    assert load_model(tuned).step == 1
    with torch.no_grad():  # one step of AdamW from the first model's weights, not from a fresh start
        moved = max(float((load_model(tuned).net.state_dict()[k] - v).abs().max()) for k, v in base.items())
    assert 0 < moved < 0.05
    other = replace(tiny_cfg, out=str(Path(tiny_cfg.out).with_name("other")), init_from=str(first),
                    model=replace(tiny_cfg.model, features=4))
    with pytest.raises(CheckpointError, match="cannot fine-tune"):
        fit(other)


@pytest.mark.parametrize("native", [False, True])
def test_bf16_training_warns_only_on_a_cpu_without_native_bf16(tiny_cfg: TrainConfig, monkeypatch,
                                                                native: bool) -> None:
    import warnings

    from decode_mem.model import precision

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fit(replace(tiny_cfg, amp="bf16", device="cpu", steps=1, val_every=1, checkpoint_every=1))
    assert any("without native bf16" in str(w.message) for w in seen) is not native


def test_cli_max_minutes_stops_a_run_with_a_checkpoint_that_resume_continues(tmp_path: Path, capsys) -> None:
    import torch

    out = tmp_path / "cli"
    args = ["--preset", "tiny", "--steps", "100000", "--batch_size", "2", "--frame_size", "16", "16",
            "--val_every", "100000", "--checkpoint_every", "100000", "--out", str(out), "--quiet"]
    assert main([*args, "--max_minutes", "0.01"]) == 0  # 0.6 s of training, far fewer than 100000 steps
    step = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)["meta"]["step"]
    assert 0 < step < 100000
    assert main([*args, "--max_minutes", "0"]) == 2  # refused before any work, one line naming the setting
    assert "max_minutes" in capsys.readouterr().err


def test_a_3d_models_card_leaves_out_the_2d_reference_physics(tiny_cfg: TrainConfig, tmp_path: Path) -> None:
    """A 3-D model scored on a 2-D Gaussian PSF reads nonsense ('Jaccard 0.019' on the field-PSF benchmark's fit card,
    ad hoc): the card says why it is not evaluated instead, and the fit's budget counts only the card's
    own-simulation evaluation."""
    from decode_mem.export.card import export_model, reference_gap
    from decode_mem.fit.budget import card_evaluations

    assert reference_gap(tiny_cfg.simulation, tiny_cfg.model) is None  # 2-D Gaussian: the reference applies
    assert card_evaluations(tiny_cfg.simulation, tiny_cfg.model) == 4
    sim = replace(tiny_cfg.simulation, psf="pupil", z_range=(-300.0, 300.0))
    model = replace(tiny_cfg.model, use_z=True, z_scale=400.0)
    assert "3-D model trained on the PSF 'pupil'" in reference_gap(sim, model) and card_evaluations(sim, model) == 1
    fit(replace(tiny_cfg, steps=2, simulation=sim, model=model))
    card = export_model(Path(tiny_cfg.out), tmp_path / "models" / "z", n_eval=4, frame_size=(16, 16))[1].read_text()
    assert "Reference physics (a 2-D Gaussian PSF on an EMCCD): not evaluated: a 3-D model trained on the PSF " \
        "'pupil'" in card
    assert "| 0.2 |" not in card and "Its own training simulation" in card
