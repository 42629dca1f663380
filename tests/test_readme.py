"""Every Python block of the README runs as written, on the quick start's files (its ``--quick`` form, in a
temporary folder laid out like the repository after the quick start)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> Path:
    from decode_mem.pipeline import run_pipeline

    where = tmp_path_factory.mktemp("readme")
    run_pipeline(ROOT / "pipelines" / "quickstart.yaml", out=where / "runs" / "quickstart", quick=True,
                 overrides={"threads": 1}, echo=lambda _: None)
    return where


def test_the_readme_has_python_blocks() -> None:
    assert BLOCKS and any("predict_stack" in b for b in BLOCKS)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_a_readme_block_runs_as_written(index: int, quickstart: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(quickstart)
    namespace: dict = {}
    exec(compile(BLOCKS[index], f"README.md python block {index + 1}", "exec"), namespace)
    if "report" in namespace:  # the Library block: each call did its work
        assert namespace["report"].ok and (quickstart / "runs" / "quickstart" / "locs" / "stack.csv").is_file()
        assert namespace["output"].shape[0] == 10 and len(namespace["drift"].frames) > 0
        assert capsys.readouterr().out.strip()  # the block's own print


def test_the_readme_test_command_is_what_ci_runs() -> None:
    """The README's "Run the tests" command is ``.ci/run``'s last line."""
    readme = (ROOT / "README.md").read_text()
    (command,) = re.findall(r'pip install -e "\.\[test\]" && (python -m pytest[^\n`]*)', readme)
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert ci[-1] == command.strip(), (ci[-1], command)
