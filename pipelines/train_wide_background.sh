#!/usr/bin/env bash
# The wide generalist (train_generalist_2d_wide.yaml) trained in the background on one CPU thread at the lowest
# priority: it takes only the time the machine would otherwise leave idle (THREADS=2 on a machine left to it:
# on a 2-core Xeon 105-113 steps a minute per piece against about 86 on one thread, the progress CSV's rows).
# Each piece trains 9 minutes and the next one resumes from runs/generalist_2d_wide/checkpoint.pt; a machine
# without that folder continues from a weights-only snapshot in data/models/snapshots/ where one is there (the
# optimizer's moments start afresh, the step, learning-rate schedule and data stream continue), else starts afresh. Stops when every step is done.
# The shipped data/models/default_2d_wide.pt was trained this way (its pieces: default_2d_wide_progress.csv);
# export a finished run with python -m decode_mem.export runs/generalist_2d_wide --out data/models/default_2d_wide.
#   nohup bash pipelines/train_wide_background.sh > runs/generalist_2d_wide.out 2>&1 &
set -uo pipefail
cd "$(dirname "$0")/.."
RUN=runs/generalist_2d_wide
SNAPSHOT=data/models/snapshots/default_2d_wide_snapshot.pt
mkdir -p "$RUN" "$(dirname "$SNAPSHOT")"
if [ ! -f "$RUN/checkpoint.pt" ] && [ -f "$SNAPSHOT" ]; then
  cp "$SNAPSHOT" "$RUN/checkpoint.pt"
fi
PROGRESS=data/models/default_2d_wide_progress.csv  # one row per piece: when it ended, the steps done
[ -f "$PROGRESS" ] || echo "utc,steps,machine" > "$PROGRESS"
while true; do
  chrt --idle 0 nice -n 19 python -m decode_mem.train --config pipelines/train_generalist_2d_wide.yaml --out "$RUN" \
    --device cpu --threads "${THREADS:-1}" --quiet || { echo "piece failed (exit $?)"; sleep 60; }
  steps=$(python -c "import sys, torch; print(torch.load(sys.argv[1], map_location='cpu', weights_only=False)['meta']['step'])" "$RUN/checkpoint.pt" 2>/dev/null || echo 0)
  # the weights-only snapshot a later machine continues from (commit it now and then; it replaces the last one)
  python -c "import sys; from decode_mem.train.resume import save_weights_snapshot as s; s(sys.argv[1], sys.argv[2])" \
    "$RUN/checkpoint.pt" "$SNAPSHOT" 2>/dev/null
  echo "$(date -u +%FT%TZ),$steps,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) x$(nproc)" >> "$PROGRESS"
  echo "$(date -u +%FT%TZ) steps done: $steps"
  [ "$steps" -ge 30000 ] && break
done
