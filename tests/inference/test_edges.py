"""No frame-edge artifacts: with the shipped model, detections within 2 px of the frame edge are as dense as in the
interior (relative to the ground truth), on a cell-like background and a frame size that is not a multiple of
the network's down-sampling factor."""

from __future__ import annotations

import numpy as np

from decode_mem.evaluate import evaluate
from decode_mem.infer import predict_stack
from decode_mem.io.table import EmitterTable
from decode_mem.model.checkpoint import load_model
from decode_mem.simulate import SimulationConfig, simulate_movie

EDGE = 2.0  # px


def _near_edge(table: EmitterTable, h: int, w: int) -> np.ndarray:
    x, y = table["x"], table["y"]
    return (x < EDGE - 0.5) | (y < EDGE - 0.5) | (x > w - 0.5 - EDGE) | (y > h - 0.5 - EDGE)


def test_detections_near_the_frame_edge_are_as_dense_as_inside(shipped_model) -> None:
    h, w = 101, 87
    cfg = SimulationConfig.from_dict({"frame_size": [h, w], "density": 1.0, "margin": 6.0, "bg": 100.0,
                                      "bg_mode": "cell", "bg_smooth_scale": 40.0})
    adu, gt, _ = simulate_movie(cfg, 40, seed=11)
    model = load_model(shipped_model)
    pred = EmitterTable.concat(predict_stack(adu, model, amp="off", chunk_size=64, batch_size=2))
    assert evaluate(pred, gt, pixel_size=cfg.camera.pixel_size).jaccard > 0.6  # the model works on this movie
    edge_pred, edge_gt = _near_edge(pred, h, w), _near_edge(gt, h, w)
    assert edge_gt.sum() > 100  # enough ground truth near the edges for the ratio to mean something
    ratio = (edge_pred.sum() / (~edge_pred).sum()) / (edge_gt.sum() / (~edge_gt).sum())
    assert 0.8 < ratio < 1.25, f"edge/interior detection density is {ratio:.2f}x the ground truth's"
    # and the edge detections are real: recall near the edge is close to the interior's
    near = evaluate(pred.select(edge_pred), gt.select(edge_gt), pixel_size=cfg.camera.pixel_size)
    inner = evaluate(pred.select(~edge_pred), gt.select(~edge_gt), pixel_size=cfg.camera.pixel_size)
    assert near.recall > inner.recall - 0.15 and near.precision > inner.precision - 0.15
