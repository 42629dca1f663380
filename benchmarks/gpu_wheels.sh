#!/usr/bin/env bash
# The wheels a lent GPU machine lacks (DESIGN §9: zarr, numcodecs, dask, distributed and what they need; it has
# torch, numpy, tifffile, scikit-image, scipy, h5py, pyarrow, matplotlib, pytest, pytest-xdist, nvidia-ml-py),
# downloaded here into .whl/ (ignored by git) for its Python 3.12, at the versions installed here. Run once per
# checkout before benchmarks/gpu_session.sh; about 13 MB, no network needed there. Not brought: numba (its llvmlite
# wheel alone is ~57 MB, over the device's 64 MiB carry with these): the linker runs there as plain Python, slower,
# with a warning (decode_mem/link/kernels.py).
#   bash benchmarks/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
NAMES=(zarr numcodecs donfig google-crc32c dask distributed partd locket tblib tornado zict)
pins=()
for name in "${NAMES[@]}"; do
  version=$(python -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name") \
    || { echo "gpu_wheels.sh: $name is not installed here: pip install -e . first" >&2; exit 2; }
  pins+=("$name==$version")
done
mkdir -p .whl
python -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${pins[@]}"
ls .whl
