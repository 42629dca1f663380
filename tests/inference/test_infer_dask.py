"""Scale-out: a dask LocalCluster with 2 worker processes writes the files a single process writes."""

from __future__ import annotations

import filecmp

from infer_helpers import write_stacks

from decode_mem.infer import InferConfig, run_inference


def test_two_dask_workers_equal_one_process(shipped_model, sample_frames, tmp_path):
    write_stacks(tmp_path / "in", sample_frames, 2, 70)
    (tmp_path / "in" / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    # the same sizes for both runs ('auto' is chosen by timing, once per process: another process may choose other
    # tiles, whose results agree only to float rounding)
    common = dict(inputs=(str(tmp_path / "in"),), model=str(shipped_model), formats=("csv", "parquet"), block=16,
                  threads=1, chunk_size=64, batch_size=4)
    single = run_inference(InferConfig(out=str(tmp_path / "one"), **common))
    # 20 frames per task -> ranges of 32 frames (the block is 16): each stack is split over both workers
    multi = run_inference(InferConfig(out=str(tmp_path / "dask"), workers=2, frames_per_task=20, **common))
    assert [f.stack for f in multi.failures] == [f.stack for f in single.failures] == [str(tmp_path / "in/bad.npy")]
    assert len(multi.worker_peak_rss_anon_mb) == 2  # both worker processes ran tasks
    assert [s.localizations for s in multi.stacks] == [s.localizations for s in single.stacks]
    # byte for byte, not "the same emitters but for those on the threshold's fence": both runs compute every
    # block with the same sizes, the same blocks (ranges start on multiples of the block, each with its real
    # context frames), one torch thread and this machine's kernels, so no summation order differs anywhere
    for name in ("s0.csv", "s1.csv", "s0.parquet", "s1.parquet"):
        assert filecmp.cmp(tmp_path / "one" / name, tmp_path / "dask" / name, shallow=False), name
