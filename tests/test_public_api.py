"""``import decode_mem as dm``: the entry points a user types first, imported lazily (no torch at import)."""

from __future__ import annotations

import subprocess
import sys

import decode_mem as dm


def test_the_main_entry_points_are_there() -> None:
    assert set(dm.__all__) <= set(dir(dm))
    for name in dm.__all__:
        assert callable(getattr(dm, name)), name
    assert dm.predict_stack.__module__ == "decode_mem.infer.predict"
    assert dm.open_stack.__module__ == "decode_mem.io.stack"


def test_import_is_lazy_and_fast() -> None:
    code = ("import sys, decode_mem; assert 'torch' not in sys.modules, 'import decode_mem imported torch'; "
            "decode_mem.open_stack; assert 'torch' not in sys.modules; decode_mem.load_model; "
            "assert 'torch' in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_load_model_without_a_path_is_the_shipped_model() -> None:
    model = dm.load_model()
    assert model.path.name == "default_2d.pt" and model.envelope["psf_sigma_px"]


def test_unknown_names_raise_attribute_error() -> None:
    try:
        dm.no_such_thing  # noqa: B018
    except AttributeError as e:
        assert "no_such_thing" in str(e)
    else:
        raise AssertionError("no AttributeError")


def test_a_foreign_file_is_one_short_line_naming_it(tmp_path) -> None:
    """Not a checkpoint: one line, the file's name, and never torch's advice to unpickle with weights_only=False."""
    import pickle

    from decode_mem.errors import CheckpointError

    bad = tmp_path / "foreign.pt"
    bad.write_bytes(pickle.dumps({"a": ValueError("a pickled Python object")}))
    try:
        dm.load_model(bad)
    except CheckpointError as e:
        text = str(e)
        assert "foreign.pt" in text and "\n" not in text and "weights_only" not in text, text
    else:
        raise AssertionError("no CheckpointError")


def test_the_old_name_of_the_shipped_model_still_imports() -> None:
    """``decode_mem.infer.DEFAULT_MODEL``, the old second name of ``SHIPPED_MODEL``, still works in scripts."""
    from decode_mem.infer import DEFAULT_MODEL
    from decode_mem.model.checkpoint import SHIPPED_MODEL

    assert DEFAULT_MODEL == SHIPPED_MODEL and DEFAULT_MODEL.name == "default_2d.pt"


def test_the_planners_names_still_import_from_decode_mem_plan() -> None:
    """The planner moved to ``decode_mem.footprint`` (below infer and train); ``decode_mem.plan`` keeps its names."""
    import decode_mem.footprint as footprint
    import decode_mem.plan as plan

    for name in plan.__all__:
        assert getattr(plan, name) is getattr(footprint, name), name
    assert set(plan.__all__) == set(footprint.__all__)
