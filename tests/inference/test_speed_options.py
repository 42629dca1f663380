"""The speed paths the GPU check measures are options of ``predict_stack`` (defaults chosen from measurements):
channels-last off gives the same emitters, a torch.compile mode reaches the executor."""

from __future__ import annotations

import pytest
from numerics import assert_same_emitters

from decode_mem.errors import ConfigError
from decode_mem.infer import predict_stack
from decode_mem.io.table import EmitterTable
from decode_mem.model.checkpoint import load_model
from decode_mem.postprocess import PostprocessConfig


def test_contiguous_weights_and_inputs_give_the_channels_last_emitters(shipped_model, sample_frames) -> None:
    frames = sample_frames[:6]
    runs = {}
    for channels_last in (True, False):
        model = load_model(str(shipped_model))
        runs[channels_last] = EmitterTable.concat(predict_stack(frames, model, chunk_size=64, batch_size=2, amp="off",
                                                                device="cpu", channels_last=channels_last))
    # another summation order only: the same emitters, sub-nm, but for those on the threshold's fence
    assert_same_emitters(runs[True], runs[False], PostprocessConfig().threshold)


def test_a_compile_mode_is_refused_with_parallel_streams(shipped_model, sample_frames) -> None:
    with pytest.raises(ConfigError, match=r"torch\.compile"):
        next(predict_stack(sample_frames[:4], load_model(str(shipped_model)), device="cpu", streams=2,
                           compile="reduce-overhead"))
