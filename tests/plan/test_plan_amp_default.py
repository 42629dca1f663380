"""``plan`` plans the precision ``infer`` runs: ``--amp auto`` by default (issue 46: plan planned ``off`` where
infer ran ``auto``, bf16 on a CPU with native bf16)."""

from __future__ import annotations

import decode_mem.footprint.choose as choose
from decode_mem.plan.__main__ import main


def test_plan_defaults_to_infers_amp(monkeypatch, capsys) -> None:
    from decode_mem.infer.__main__ import build_parser as infer_parser

    seen = []
    original = choose.choose_sizes_here

    def spy(*args, **kwargs):
        seen.append(kwargs["amp"])
        return original(*args, **kwargs)

    monkeypatch.setattr(choose, "choose_sizes_here", spy)
    args = ["--frame", "64", "64", "--chunk_size", "64", "--batch_size", "2", "--no_probe", "--device", "cpu"]
    assert main(args) == 0
    infer_default = infer_parser().parse_args(["x.tif", "--out", "o"]).amp
    assert seen == [infer_default] == ["auto"]
