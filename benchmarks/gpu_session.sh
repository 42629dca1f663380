#!/usr/bin/env bash
# The GPU session (the GPU issue): what a lent GPU machine runs, in two calls that fit its 15 minutes, every
# result written under $OUT (the device tool brings back 8 files of at most 16 MB).
#
#   here, once:  bash benchmarks/gpu_wheels.sh          # the wheels that machine lacks, into .whl/
#   call 1:      bash benchmarks/gpu_session.sh check   # carry [".whl"], timeout_s 590: bench_gpu (its own
#                                                       # budget, 400 s), then the suite for at most 120 s
#   call 2:      bash benchmarks/gpu_session.sh train   # carry [".whl"], timeout_s 300, right after call 1 (the
#                                                       # machine stays warm 30 s): one piece of the wide model's
#                                                       # recipe from its start (the shipped wide model finished
#                                                       # it on a CPU): its log, the GPU's training pace, comes back
#
# Then, here: copy $OUT's gpu.* and wide_train_log.csv into benchmarks/results/ and commit them with the device
# named.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_session_out}
mkdir -p "$OUT"
what=${1:-check}
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl || { echo "gpu_session.sh: the wheels in .whl/ did not install" >&2; exit 2; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD  # a machine with everything installed (a CPU try of this script)
fi
export PYTHONUNBUFFERED=1
case "$what" in
  check)
    timeout $(( ${GPU_BUDGET_S:-400} + 40 )) python3 benchmarks/bench_gpu.py --budget_s "${GPU_BUDGET_S:-400}" \
      --out "$OUT/gpu.md" 2>&1 | tee "$OUT/gpu_bench.log"
    # the suite, each test given its time limit by the whole run's: what ran in the time is in the log
    # -v -rfE: every test's outcome as it finishes (a suite stopped by the time limit still names its failures)
    timeout "${SUITE_S:-120}" python3 -m pytest -v -rfE -n "${SUITE_WORKERS:-8}" --dist loadfile \
      -p no:cacheprovider > "$OUT/gpu_suite.log" 2>&1
    echo "suite exit $? (124: stopped at ${SUITE_S:-120} s)" >> "$OUT/gpu_suite.log"
    tail -3 "$OUT/gpu_suite.log"
    ;;
  train)
    run=/tmp/wide_run
    mkdir -p "$run"
    timeout $(( ${TRAIN_S:-180} + 90 )) python3 -m decode_mem.train --config pipelines/train_generalist_2d_wide.yaml \
      --out "$run" --max_minutes "$(python3 -c "print(${TRAIN_S:-180} / 60)")" --quiet 2>&1 | tail -5
    cp "$run/train_log.csv" "$OUT/wide_train_log.csv"
    python3 -c "import sys, torch; print('steps done:', torch.load(sys.argv[1], map_location='cpu', weights_only=False)['meta']['step'])" \
      "$run/checkpoint.pt"
    ;;
  *)
    echo "gpu_session.sh: check or train, not '$what'" >&2
    exit 2
    ;;
esac
