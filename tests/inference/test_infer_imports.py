"""``python -m decode_mem.infer --help`` and the start of a run import only what they use: the plotting, cluster,
image-analysis and file-format libraries load when a report, a cluster or that format is reached (scipy: ~0.2 s of a
run's start, asyncio, which tqdm.auto imports for notebooks: ~0.04 s)."""

from __future__ import annotations

import json
import subprocess
import sys

from infer_helpers import REPO

LATER = ("matplotlib", "scipy", "asyncio", "dask", "distributed", "skimage", "pyarrow", "h5py", "zarr", "pandas")


def _loaded(code: str) -> list[str]:
    probe = f"import json, sys; {code}; print(json.dumps(sorted(m for m in {LATER!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_help_and_the_start_of_a_run_import_none_of_the_later_libraries() -> None:
    assert _loaded("from decode_mem.infer.__main__ import main; main(['--help'])") == []
    # what a run has imported when it starts its first stack (the domain check and the writers of a CSV run)
    assert _loaded("import decode_mem.infer.runner, decode_mem.infer.console; "
                   "from decode_mem.io.localizations import open_writer") == []


def test_the_report_image_loads_the_plotting_library_in_a_thread_of_its_own() -> None:
    """The report's image starts importing matplotlib (and scipy.ndimage, which smooths the super-resolution
    overview) with the first block drawn into it, beside the loop, so that the report after the loop does not wait
    for the import; made before the loop, it imports nothing yet (the engine's set-up runs alone)."""
    code = ("from decode_mem.infer.batch_report import ReportImage; from decode_mem.io.table import EmitterTable; "
            "import sys; image = ReportImage((64, 64), 100.0); "
            "assert image.imports is None and 'matplotlib' not in sys.modules; "
            "image.add(EmitterTable.empty()); "
            "assert image.imports.name == 'decode_mem-report-imports'; image.imports.join(); "
            "assert 'matplotlib.figure' in sys.modules and 'matplotlib.pyplot' not in sys.modules")
    assert _loaded(code) == ["matplotlib", "scipy"]
