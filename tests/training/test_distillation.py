"""Knowledge distillation (``TrainConfig.teacher``): the detection term, its step, its plan and its refusals."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from decode_mem.errors import CheckpointError, ConfigError
from decode_mem.footprint.training import plan_training
from decode_mem.model.loss import DecodeLoss, detection_distillation
from decode_mem.model.net import CHANNEL_INDEX, DecodeNet, ModelConfig
from decode_mem.simulate.config import SimulationConfig
from decode_mem.train.__main__ import main
from decode_mem.train.config import TrainConfig
from decode_mem.train.loop import fit, load_teacher
from decode_mem.train.step import make_scaler, train_step

CPU = torch.device("cpu")
P = CHANNEL_INDEX["p_logit"]


def _output(logits: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(logits.shape[0], 10, *logits.shape[1:])
    out[:, P] = logits
    return out


def test_the_term_is_the_bernoulli_kl_summed_over_pixels_and_zero_for_the_same_detections() -> None:
    torch.manual_seed(0)
    teacher = torch.randn(3, 8, 8) * 4
    assert float(detection_distillation(_output(teacher), _output(teacher))) == pytest.approx(0.0, abs=1e-5)
    student = teacher + torch.randn(3, 8, 8)
    p_t, p_s = torch.sigmoid(teacher).double(), torch.sigmoid(student).double()
    kl = p_t * torch.log(p_t / p_s) + (1 - p_t) * torch.log((1 - p_t) / (1 - p_s))
    expected = kl.sum(dim=(1, 2)).mean()
    got = detection_distillation(_output(student), _output(teacher))
    assert float(got) == pytest.approx(float(expected), rel=1e-4)
    assert float(got) > 0.1


def test_only_the_student_gets_a_gradient_and_it_points_to_the_teacher() -> None:
    teacher = torch.full((1, 10, 4, 4), 0.0)
    teacher[:, P] = 3.0  # the teacher is sure: p 0.95
    student = torch.zeros(1, 10, 4, 4, requires_grad=True)
    detection_distillation(student, teacher).backward()
    grad = student.grad
    assert (grad[:, P] < 0).all()  # descending raises the student's logits towards the teacher's
    assert float(grad[:, [i for i in range(10) if i != P]].abs().sum()) == 0.0  # detections only
    with pytest.raises(ValueError, match="teacher output"):
        detection_distillation(torch.zeros(1, 10, 4, 4), torch.zeros(1, 10, 4, 5))


def _batch() -> dict[str, torch.Tensor]:
    from decode_mem.train.data import SimulatedBatches

    batch = SimulatedBatches(SimulationConfig(frame_size=(16, 16), density=2.0), 2, 1, seed=3).batch(0, 0)
    batch.pop("level_noise")
    return batch


def _step(teacher: DecodeNet | None, weight: float) -> tuple[dict[str, float], list[torch.Tensor]]:
    torch.manual_seed(0)
    net = DecodeNet(ModelConfig.tiny())
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    row = train_step(net, DecodeLoss(model_config=net.config), [_batch()], 1, opt, make_scaler(CPU, None),
                     device=CPU, amp_dtype=None, grad_clip=None, teacher=teacher, teacher_weight=weight)
    return row, [p.detach().clone() for p in net.parameters()]


def test_a_step_with_a_teacher_logs_its_term_and_moves_the_weights_otherwise() -> None:
    torch.manual_seed(1)
    teacher = DecodeNet(ModelConfig.tiny()).eval()
    plain, plain_weights = _step(None, 1.0)
    taught, taught_weights = _step(teacher, 1.0)
    _, silent_weights = _step(teacher, 0.0)
    assert "distill" not in plain and taught["distill"] > 0
    assert taught["loss"] == pytest.approx(plain["loss"] + taught["distill"], rel=1e-5)
    assert any(not torch.equal(a, b) for a, b in zip(plain_weights, taught_weights, strict=True))
    for a, b in zip(plain_weights, silent_weights, strict=True):  # weight 0: the step of no teacher
        torch.testing.assert_close(a, b)
    assert all(p.grad is None for p in teacher.parameters())


def test_the_plan_counts_the_teacher() -> None:
    net = DecodeNet(ModelConfig.tiny())
    teacher = DecodeNet(ModelConfig.small())
    sim = SimulationConfig(frame_size=(32, 32), density=1.0)
    alone = plan_training(net, sim, batch_size=4, val_size=4)
    taught = plan_training(net, sim, batch_size=4, val_size=4, teacher=teacher)
    params = sum(p.numel() * p.element_size() for p in teacher.parameters())
    # its parameters and at least its output (4 windows x 10 channels x 32² float32)
    assert taught.teacher_bytes >= params + 4 * 10 * 32 * 32 * 4
    assert taught.host_bytes - alone.host_bytes == taught.teacher_bytes
    assert taught.as_dict()["teacher_mib"] > 0


def _save(net: DecodeNet, path: Path) -> Path:
    from decode_mem.model.checkpoint import save_checkpoint
    from decode_mem.simulate.config import SimulationConfig

    sim = SimulationConfig(frame_size=(16, 16))
    return save_checkpoint(path, net=net, camera=sim.camera, simulation=sim.to_dict(), step=1)


def test_a_teacher_that_reads_its_inputs_otherwise_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    student = DecodeNet(ModelConfig.tiny())
    other = _save(DecodeNet(ModelConfig.tiny(input_transform="linear")), tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="input_transform"):
        load_teacher(str(other), student, CPU)
    out = tmp_path / "run"
    rc = main(["--preset", "tiny", "--steps", "2", "--batch_size", "2", "--frame_size", "16", "16", "--out", str(out),
               "--teacher", str(other), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith("error:") and "other.pt" in err
    assert not any(out.iterdir()) if out.exists() else True  # nothing written
    rc = main(["--preset", "tiny", "--steps", "2", "--frame_size", "16", "16", "--out", str(tmp_path / "missing"),
               "--teacher", str(tmp_path / "nowhere.pt"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "nowhere.pt" in err
    with pytest.raises(ConfigError, match="teacher_weight"):
        TrainConfig(teacher_weight=-1.0)


def test_a_run_with_a_teacher_logs_the_distillation(tiny_cfg: TrainConfig, tmp_path: Path) -> None:
    teacher = _save(DecodeNet(ModelConfig.tiny()), tmp_path / "teacher.pt")
    fit(replace(tiny_cfg, teacher=str(teacher), steps=2))
    log = (Path(tiny_cfg.out) / "train_log.csv").read_text().splitlines()
    column = log[0].split(",").index("distill")
    assert all(float(row.split(",")[column]) > 0 for row in log[1:])


def test_a_teacher_weight_without_a_teacher_is_said_to_change_nothing() -> None:
    assert any("changes nothing without a teacher" in n for n in TrainConfig(teacher_weight=2.0).notes())
    assert not TrainConfig().notes() and not TrainConfig(teacher="t.pt", teacher_weight=2.0).notes()
