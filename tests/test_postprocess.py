"""Post-processing: network output maps -> emitter tables, and exactness across tile seams."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from decode_mem import postprocess
from decode_mem.errors import ConfigError
from decode_mem.io.table import EmitterTable
from decode_mem.postprocess import (
    MARGIN,
    OUTPUT_CHANNELS,
    PostprocessConfig,
    candidates_to_emitters,
    detect_candidates,
    output_to_emitters,
)

CH = {name: k for k, name in enumerate(OUTPUT_CHANNELS)}
CFG = PostprocessConfig(threshold=0.5, raw_threshold=0.1, split_threshold=0.6)


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return np.log(p) - np.log1p(-p)


def blob_output(emitters: list[dict], h: int, w: int, amp: float = 0.55, sigma: float = 0.7) -> np.ndarray:
    """A (10, H, W) output with a Gaussian blob of p per emitter; every other channel holds, at each pixel,
    the value of the nearest emitter (offsets pointing at it), as a trained network would."""
    rows, cols = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.zeros((len(OUTPUT_CHANNELS), h, w), np.float32)
    p = np.zeros((h, w))
    d2 = np.stack([(cols - e["x"]) ** 2 + (rows - e["y"]) ** 2 for e in emitters])
    for e, dd in zip(emitters, d2, strict=True):
        p += e.get("amp", amp) * np.exp(-dd / (2 * sigma**2))
    out[CH["p_logit"]] = _logit(p)
    nearest = np.argmin(d2, axis=0)
    for k, e in enumerate(emitters):
        at = nearest == k
        out[CH["dx"]][at] = (e["x"] - cols)[at]
        out[CH["dy"]][at] = (e["y"] - rows)[at]
        for name in ("photons", "z", "bg", "sigma_photons", "sigma_x", "sigma_y", "sigma_z"):
            out[CH[name]][at] = e.get(name, 0.0)
    return out


def _sorted(table: EmitterTable) -> EmitterTable:
    return table.select(np.lexsort((table["x"], table["y"], table["frame"])))


def _assert_tables_equal(a: EmitterTable, b: EmitterTable) -> None:
    a, b = _sorted(a), _sorted(b)
    assert a.names == b.names
    assert len(a) == len(b)
    for name in a.names:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


EMITTERS = [
    {"x": 5.3, "y": 6.8, "photons": 1000.0, "z": -120.0, "bg": 10.0, "sigma_x": 0.1, "sigma_y": 0.2,
     "sigma_z": 30.0, "sigma_photons": 50.0},
    {"x": 20.0, "y": 4.49, "photons": 2500.0, "z": 300.0, "bg": 12.0, "sigma_x": 0.3, "sigma_y": 0.1,
     "sigma_z": 40.0, "sigma_photons": 80.0},
    {"x": 12.51, "y": 17.45, "photons": 800.0, "z": 0.0, "bg": 9.0, "sigma_x": 0.2, "sigma_y": 0.2,
     "sigma_z": 20.0, "sigma_photons": 60.0},
    {"x": 33.9, "y": 22.1, "photons": 1500.0, "z": 50.0, "bg": 11.0, "sigma_x": 0.15, "sigma_y": 0.25,
     "sigma_z": 35.0, "sigma_photons": 70.0},
]


def _check_emitters(table: EmitterTable, emitters: list[dict], frame: int = 0) -> None:
    assert len(table) == len(emitters)
    got = _sorted(table)
    want = sorted(emitters, key=lambda e: (e["y"], e["x"]))
    np.testing.assert_array_equal(got["frame"], frame)
    for name in ("x", "y", "photons", "z", "bg", "sigma_x", "sigma_y", "sigma_z", "sigma_photons"):
        np.testing.assert_allclose(got[name], [e[name] for e in want], rtol=1e-6, atol=1e-5, err_msg=name)
    assert np.all((got["prob"] >= CFG.threshold) & (got["prob"] <= 1.0))


def test_channel_contract_matches_the_model() -> None:
    """The channels this module reads by name (``OUTPUT_CHANNELS``) carry what the model puts there: with every
    raw head output saturated high, then low, each named channel of the model's output sits at the bound its
    name promises (a logit unbounded, photons in (0, photon_scale), offsets in (-1, 1) px, z in ±z_scale, sigmas
    between their floor and floor + sigma_max units, background in (0, bg_scale)), so no two kinds are swapped."""
    from dataclasses import replace

    from decode_mem.model import DecodeNet, ModelConfig

    cfg = replace(ModelConfig.tiny(), use_z=True)
    net = DecodeNet(cfg)
    units = {"sigma_photons": (cfg.photon_scale, cfg.sigma_photons_eps), "sigma_x": (1.0, cfg.sigma_eps),
             "sigma_y": (1.0, cfg.sigma_eps), "sigma_z": (cfg.z_scale, cfg.sigma_eps * cfg.z_scale)}
    low = {"p_logit": -30.0, "photons": 0.0, "dx": -1.0, "dy": -1.0, "z": -cfg.z_scale, "bg": 0.0,
           **{name: floor for name, (_, floor) in units.items()}}
    high = {"p_logit": 30.0, "photons": cfg.photon_scale, "dx": 1.0, "dy": 1.0, "z": cfg.z_scale,
            "bg": cfg.bg_scale, **{name: cfg.sigma_max * unit + floor for name, (unit, floor) in units.items()}}
    for raw, expected in ((30.0, high), (-30.0, low)):
        out = net.activate(torch.full((1, len(OUTPUT_CHANNELS), 2, 2), raw))
        assert out.shape[1] == len(OUTPUT_CHANNELS)
        got = {name: float(out[0, CH[name], 0, 0]) for name in OUTPUT_CHANNELS}
        for name in OUTPUT_CHANNELS:
            assert got[name] == pytest.approx(expected[name], rel=1e-5, abs=1e-6), (name, got[name])


def test_blobs_at_subpixel_positions_give_exactly_those_emitters() -> None:
    out = blob_output(EMITTERS, 28, 40)
    table = output_to_emitters(out, [0], config=CFG)
    assert table.names == ("frame", "x", "y", "z", "photons", "bg", "prob", "sigma_x", "sigma_y", "sigma_z",
                           "sigma_photons")
    _check_emitters(table, EMITTERS)


def test_numpy_tensor_and_3d_inputs_agree() -> None:
    out = blob_output(EMITTERS, 28, 40)
    a = output_to_emitters(out, [0], config=CFG)
    b = output_to_emitters(torch.from_numpy(out)[None], [0], config=CFG)
    c = output_to_emitters(torch.from_numpy(out).double(), 0, config=CFG)
    _assert_tables_equal(a, b)
    _assert_tables_equal(a, c)


@pytest.mark.parametrize("frames, offset, core", [
    (0, (0, 0), None),
    ([7, 3, 11], (64, -16), (slice(1, 27), slice(1, 39))),
    (5, (8, 8), (slice(3, 3), slice(0, 40))),  # an empty core
])
@pytest.mark.parametrize("cfg", [CFG, PostprocessConfig(threshold=0.0005, raw_threshold=0.0, split_threshold=0.3,
                                                        clamp=False)])
def test_candidates_of_an_array_are_the_tensors_rows_bit_for_bit(frames, offset, core, cfg) -> None:
    """A CPU runtime's output is a numpy array, detected with numpy (``TiledExecutor.arrays``): the same rows as
    torch's operations give for it as a tensor, every bit (logits, channels, frame, row, column), in the same
    order, with and without the float32 prefilter (a threshold below its margin: no prefilter)."""
    rng = np.random.default_rng(3)
    out = np.stack([_seam_output(seed, 28, 40) for seed in range(3)])
    out[:, CH["p_logit"], 5:9, 5:9] = _logit(rng.uniform(0.55, 0.95, (3, 4, 4)))  # a crowd: maxima and splits
    out[:, CH["photons"]] = rng.normal(1000, 300, out[:, 0].shape).astype(np.float32)
    rows = detect_candidates(out, frames, config=cfg, offset=offset, core=core)
    ref = detect_candidates(torch.from_numpy(out), frames, config=cfg, offset=offset, core=core).numpy()
    assert isinstance(rows, np.ndarray) and rows.dtype == np.float32
    assert rows.shape == ref.shape and ((core is not None and core[0].stop == 3) or len(ref) > 20)
    np.testing.assert_array_equal(rows.view(np.int32), ref.view(np.int32))


def test_two_emitters_two_pixels_apart_are_both_found() -> None:
    pair = [{"x": 10.0, "y": 10.2, "photons": 100.0}, {"x": 12.0, "y": 9.9, "photons": 200.0}]
    pair = [{**e, "z": 0.0, "bg": 0.0, "sigma_x": 0.1, "sigma_y": 0.1, "sigma_z": 1.0, "sigma_photons": 1.0}
            for e in pair]
    table = output_to_emitters(blob_output(pair, 20, 24), [0], config=CFG)
    _check_emitters(table, pair)


def test_adjacent_pixels_with_high_p_are_split_into_two_emitters() -> None:
    logit = np.full((16, 16), -12.0, np.float32)
    logit[8, 8], logit[8, 9] = _logit(np.array(0.95)), _logit(np.array(0.8))  # a max and its runner-up
    out = np.zeros((10, 16, 16), np.float32)
    out[CH["p_logit"]] = logit
    out[CH["photons"], 8, 8], out[CH["photons"], 8, 9] = 1000.0, 500.0
    table = _sorted(output_to_emitters(out, [0], config=CFG))
    np.testing.assert_array_equal(table["x"], [8.0, 9.0])
    np.testing.assert_array_equal(table["photons"], [1000.0, 500.0])
    # with the split threshold above 0.8 only the maximum remains
    strict = PostprocessConfig(threshold=0.5, raw_threshold=0.1, split_threshold=0.9)
    table = output_to_emitters(out, [0], config=strict)
    np.testing.assert_array_equal(table["x"], [8.0])
    np.testing.assert_allclose(table["prob"], 1.0)  # 0.95 + 0.8 clamped


def test_summed_probability_and_clamp() -> None:
    p = np.full((9, 9), 1e-7)
    p[4, 4] = 0.4
    p[3, 4] = p[5, 4] = p[4, 3] = p[4, 5] = 0.1  # the 4 edge neighbours count
    p[3, 3] = 0.05  # a diagonal neighbour does not
    out = np.zeros((10, 9, 9), np.float32)
    out[CH["p_logit"]] = _logit(p)
    table = output_to_emitters(out, [0], config=CFG)
    assert len(table) == 1 and (table["x"][0], table["y"][0]) == (4.0, 4.0)
    np.testing.assert_allclose(table["prob"], 0.8, atol=1e-6)
    p[3, 4] = p[5, 4] = p[4, 3] = p[4, 5] = 0.35
    out[CH["p_logit"]] = _logit(p)
    np.testing.assert_allclose(output_to_emitters(out, [0], config=CFG)["prob"], 1.0)
    unclamped = PostprocessConfig(threshold=0.5, raw_threshold=0.1, clamp=False)
    np.testing.assert_allclose(output_to_emitters(out, [0], config=unclamped)["prob"], 1.8, atol=1e-6)


def test_below_threshold_is_ignored() -> None:
    faint = [{**EMITTERS[0], "amp": 0.05}]  # p below the raw threshold everywhere
    assert len(output_to_emitters(blob_output(faint, 16, 16), [0], config=CFG)) == 0
    weak = [{**EMITTERS[0], "amp": 0.2}]  # a local maximum, but its summed p is below 0.5
    assert len(output_to_emitters(blob_output(weak, 16, 16), [0], config=CFG)) == 0
    assert len(output_to_emitters(blob_output(weak, 16, 16), [0],
                                  config=PostprocessConfig(threshold=0.2, raw_threshold=0.1))) == 1


def test_batch_gives_the_right_frame_column() -> None:
    outs = np.stack([blob_output(EMITTERS[:k], 28, 40) for k in (1, 2, 4)])
    table = output_to_emitters(outs, [7, 3, 12], config=CFG)
    for frame, k in ((7, 1), (3, 2), (12, 4)):
        _check_emitters(table.select(table["frame"] == frame), EMITTERS[:k], frame=frame)
    consecutive = output_to_emitters(outs, 5, config=CFG)  # an int is the first of consecutive frames
    assert sorted(np.unique(consecutive["frame"], return_counts=True)[1]) == [1, 2, 4]
    np.testing.assert_array_equal(np.unique(consecutive["frame"]), [5, 6, 7])


def test_offset_adds_the_tile_origin() -> None:
    out = blob_output(EMITTERS, 28, 40)
    a = output_to_emitters(out, [0], config=CFG)
    b = output_to_emitters(out, [0], config=CFG, offset=(100, 2000))
    np.testing.assert_allclose(b["x"], a["x"] + 2000, atol=1e-3)
    np.testing.assert_allclose(b["y"], a["y"] + 100, atol=1e-3)


def _seam_output(seed: int, h: int, w: int) -> np.ndarray:
    """Blobs all over, some right on both sides of column/row 16, plus noisy p: many detections."""
    rng = np.random.default_rng(seed)
    emitters = [{"x": x, "y": y, "photons": 1000.0 + 10 * k, "z": float(k), "bg": 5.0, "sigma_x": 0.1,
                 "sigma_y": 0.1, "sigma_z": 10.0, "sigma_photons": 10.0, "amp": rng.uniform(0.4, 0.99)}
                for k, (x, y) in enumerate(
                    [(15.0, 5.2), (16.0, 9.7), (15.6, 20.0), (16.4, 24.3), (7.1, 15.0), (27.2, 16.0)]
                    + [tuple(rng.uniform(0, 31, 2)) for _ in range(12)])]
    out = blob_output(emitters, h, w)
    out[CH["p_logit"]] += rng.normal(0, 1.0, (h, w)).astype(np.float32)
    out[CH["dx"]] += rng.uniform(-0.5, 0.5, (h, w)).astype(np.float32)
    return out


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("margin", [MARGIN, MARGIN + 2])
def test_overlapping_pieces_with_partitioning_cores_equal_the_whole_frame(axis: int, margin: int) -> None:
    h, w = 32, 33
    out = np.stack([_seam_output(s, h, w) for s in range(3)])
    whole = output_to_emitters(out, [4, 5, 6], config=CFG)
    assert len(whole) > 20
    size = out.shape[2 + axis]
    for seam in (1, 8, 15, 16, 17, size - 1):
        lo_end, hi_start = min(seam + margin, size), max(seam - margin, 0)
        if axis == 0:
            a = output_to_emitters(out[:, :, :lo_end], [4, 5, 6], config=CFG, core=(slice(0, seam), slice(None)))
            b = output_to_emitters(out[:, :, hi_start:], [4, 5, 6], config=CFG, offset=(hi_start, 0),
                                   core=(slice(seam - hi_start, None), slice(None)))
        else:
            a = output_to_emitters(out[..., :lo_end], [4, 5, 6], config=CFG, core=(slice(None), slice(0, seam)))
            b = output_to_emitters(torch.from_numpy(out[..., hi_start:]), [4, 5, 6], config=CFG,
                                   offset=(0, hi_start), core=(slice(None), slice(seam - hi_start, None)))
        _assert_tables_equal(EmitterTable.concat([a, b]), whole)


def test_four_tiles_equal_the_whole_frame() -> None:
    out = _seam_output(7, 32, 32)
    whole = output_to_emitters(out, [0], config=CFG)
    parts = []
    for y0, y1 in ((0, 16), (16, 32)):
        for x0, x1 in ((0, 16), (16, 32)):
            ty0, tx0 = max(y0 - MARGIN, 0), max(x0 - MARGIN, 0)
            tile = out[:, ty0:y1 + MARGIN, tx0:x1 + MARGIN]
            parts.append(output_to_emitters(tile, [0], config=CFG, offset=(ty0, tx0),
                                            core=(slice(y0 - ty0, y1 - ty0), slice(x0 - tx0, x1 - tx0))))
    _assert_tables_equal(EmitterTable.concat(parts), whole)


def test_candidates_of_many_tiles_copied_at_once_give_the_tables_of_each_tile() -> None:
    """What infer does per block: every tile's candidates concatenated (on the device), one copy, one table;
    the same rows in the same order as one table per tile."""
    out = np.stack([_seam_output(s, 32, 32) for s in (7, 8)])
    per_tile, candidates = [], []
    for y0, y1 in ((0, 16), (16, 32)):
        for x0, x1 in ((0, 16), (16, 32)):
            ty0, tx0 = max(y0 - MARGIN, 0), max(x0 - MARGIN, 0)
            tile = torch.from_numpy(out[:, :, ty0:y1 + MARGIN, tx0:x1 + MARGIN])
            where = {"offset": (ty0, tx0), "core": (slice(y0 - ty0, y1 - ty0), slice(x0 - tx0, x1 - tx0))}
            per_tile.append(output_to_emitters(tile, [3, 9], config=CFG, frame_shape=(31, 31), **where))
            candidates.append(detect_candidates(tile, [3, 9], config=CFG, **where))
    block = candidates_to_emitters(torch.cat(candidates), config=CFG, frame_shape=(31, 31))
    expected = EmitterTable.concat(per_tile)
    assert len(expected) > 20 and set(expected["frame"]) == {3, 9}
    for name in expected.names:
        np.testing.assert_array_equal(block[name], expected[name], err_msg=name)


def test_the_device_prefilter_keeps_exactly_the_detections(monkeypatch) -> None:
    """Isolated maxima whose summed probability lies within 1e-6 of the threshold, and some far below it:
    dropping the far ones on the device (float32) changes nothing of the float64 result on the host."""
    rng = np.random.default_rng(4)
    h = w = 60
    p = np.full((h, w), 1e-9)
    centres = [(i, j) for i in range(2, h - 2, 4) for j in range(2, w - 2, 4)]
    for k, (i, j) in enumerate(centres):
        p[i, j] = CFG.threshold + rng.uniform(-1e-6, 1e-6) if k % 3 else rng.uniform(0.15, 0.45)
    out = np.zeros((10, h, w), np.float32)
    out[CH["p_logit"]] = _logit(p)
    with_prefilter = output_to_emitters(out, [0], config=CFG)
    kept = len(detect_candidates(out, [0], config=CFG))
    monkeypatch.setattr(postprocess, "PREFILTER_MARGIN", 2.0)  # threshold - 2 < 0: no prefilter
    assert len(detect_candidates(out, [0], config=CFG)) == len(centres) > kept
    without = output_to_emitters(out, [0], config=CFG)
    assert 0 < len(without) < len(centres) * 2 // 3 + 1  # the near ones split both ways
    for name in without.names:
        np.testing.assert_array_equal(with_prefilter[name], without[name], err_msg=name)


def test_a_margin_smaller_than_MARGIN_breaks_the_seam() -> None:
    """A pixel just left of the seam is not a maximum in the whole frame, but looks like one without margin."""
    p = np.full((8, 8), 1e-6)
    p[4, 3], p[4, 4] = 0.5, 0.9
    out = np.zeros((10, 8, 8), np.float32)
    out[CH["p_logit"]] = _logit(p)
    cfg = PostprocessConfig(threshold=0.3, raw_threshold=0.1)
    whole = output_to_emitters(out, [0], config=cfg)
    assert len(whole) == 1
    m = MARGIN - 1
    a = output_to_emitters(out[..., : 4 + m], [0], config=cfg, core=(slice(None), slice(0, 4)))
    b = output_to_emitters(out[..., 4 - m:], [0], config=cfg, offset=(0, 4 - m), core=(slice(None), slice(m, None)))
    assert len(a) + len(b) == 2


def test_invalid_inputs() -> None:
    with pytest.raises(ConfigError, match="threshold"):
        PostprocessConfig(threshold=1.5)
    with pytest.raises(ValueError, match="network output"):
        output_to_emitters(np.zeros((9, 4, 4), np.float32), [0], config=CFG)
    with pytest.raises(ValueError, match="frames"):
        output_to_emitters(np.zeros((2, 10, 4, 4), np.float32), [0], config=CFG)
    with pytest.raises(ValueError, match="step"):
        output_to_emitters(np.zeros((10, 4, 4), np.float32), [0], config=CFG, core=(slice(0, 4, 2), slice(None)))


def test_empty_inputs_give_empty_tables_with_all_columns() -> None:
    for out, frames, core in ((np.zeros((0, 10, 4, 4), np.float32), [], None),
                              (np.full((10, 4, 4), -20, np.float32), [0], None),
                              (blob_output(EMITTERS, 28, 40), [0], (slice(0, 0), slice(None)))):
        table = output_to_emitters(out, frames, config=CFG, core=core)
        assert len(table) == 0 and "prob" in table and "sigma_photons" in table


@pytest.mark.gpu
def test_cuda_tensor_gives_the_cpu_result() -> None:
    out = torch.from_numpy(np.stack([_seam_output(s, 32, 33) for s in range(2)]))
    _assert_tables_equal(output_to_emitters(out.cuda(), [0, 1], config=CFG),
                         output_to_emitters(out, [0, 1], config=CFG))


def test_detections_outside_the_frame_are_dropped_with_frame_shape() -> None:
    """An emitter just beyond the edge is seen by its light; with the frame's shape it is not reported."""
    emitters = [{"x": -0.8, "y": 10.1}, {"x": 20.2, "y": 9.9}, {"x": 30.0, "y": 27.7}]  # 2 just beyond the edge
    out = blob_output(emitters, 28, 40)
    every = output_to_emitters(out, [0], config=CFG)
    inside = output_to_emitters(out, [0], config=CFG, frame_shape=(28, 40))
    assert len(every) == 3 and len(inside) == 1
    assert inside["x"][0] == pytest.approx(20.2, abs=1e-5)
