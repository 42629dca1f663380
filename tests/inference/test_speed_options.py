"""The speed paths the GPU check measures are options of ``predict_stack`` (defaults chosen from measurements):
channels-last off gives the same emitters, a torch.compile mode reaches the executor."""

from __future__ import annotations

import numpy as np
import pytest

from decode_mem.errors import ConfigError
from decode_mem.infer import predict_stack
from decode_mem.model.checkpoint import load_model


def test_contiguous_weights_and_inputs_give_the_channels_last_emitters(shipped_model, sample_frames) -> None:
    frames = sample_frames[:6]
    runs = {}
    for channels_last in (True, False):
        model = load_model(str(shipped_model))
        tables = list(predict_stack(frames, model, chunk_size=64, batch_size=2, amp="off", device="cpu",
                                    channels_last=channels_last))
        runs[channels_last] = {k: np.concatenate([t.columns[k] for t in tables]) for k in ("frame", "x", "y")}
    a, b = runs[True], runs[False]
    assert len(a["x"]) > 20 and len(a["x"]) == len(b["x"])
    order_a = np.lexsort((a["x"], a["y"], a["frame"]))
    order_b = np.lexsort((b["x"], b["y"], b["frame"]))
    np.testing.assert_array_equal(a["frame"][order_a], b["frame"][order_b])
    np.testing.assert_allclose(a["x"][order_a], b["x"][order_b], atol=1e-3)  # px: another summation order only


def test_a_compile_mode_is_refused_with_parallel_streams(shipped_model, sample_frames) -> None:
    with pytest.raises(ConfigError, match=r"torch\.compile"):
        next(predict_stack(sample_frames[:4], load_model(str(shipped_model)), device="cpu", streams=2,
                           compile="reduce-overhead"))
