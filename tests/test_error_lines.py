"""A library's exception as the one line a user sees (``errors.exception_line``), and a failed input's reason."""

from __future__ import annotations

from decode_mem.errors import StackError, exception_line, failure_reason


def test_an_exception_is_one_line_with_or_without_its_type() -> None:
    e = ValueError("bad row 3\n  quoted: 'a,b,c'\n  more")
    assert exception_line(e) == "ValueError: bad row 3"
    assert exception_line(e, with_type=False) == "bad row 3"
    assert exception_line(ValueError("x" * 500), limit=200) == "ValueError: " + "x" * 200
    assert exception_line(OSError()) == "OSError" == exception_line(OSError(), with_type=False)


def test_a_failed_inputs_reason_names_a_foreign_errors_type_only() -> None:
    assert failure_reason(StackError("m.tif: cut short")) == "m.tif: cut short"
    assert failure_reason(MemoryError("out of memory")) == "MemoryError: out of memory"
