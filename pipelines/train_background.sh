#!/usr/bin/env bash
# A shipped model trained in the background on one CPU thread at the lowest priority: it takes only the time the
# machine would otherwise leave idle. Each piece trains the config's max_minutes and the next one resumes from
# RUN/checkpoint.pt; a machine without that folder continues from the weights-only snapshot where one is there (the
# optimizer's moments start afresh, the step, learning-rate schedule and data stream continue), else starts afresh.
# Stops when STEPS are done; PROGRESS gets one row per piece (when it ended, the steps done, the machine).
#   nohup bash pipelines/train_background.sh CONFIG RUN SNAPSHOT PROGRESS STEPS > RUN.out 2>&1 &
# e.g. the light model: pipelines/train_generalist_2d_light.yaml runs/generalist_2d_light
#   data/models/snapshots/default_2d_light_snapshot.pt data/models/default_2d_light_progress.csv 30000
set -uo pipefail
cd "$(dirname "$0")/.."
CONFIG=$1 RUN=$2 SNAPSHOT=$3 PROGRESS=$4 STEPS=$5
mkdir -p "$RUN" "$(dirname "$SNAPSHOT")"
if [ ! -f "$RUN/checkpoint.pt" ] && [ -f "$SNAPSHOT" ]; then
  cp "$SNAPSHOT" "$RUN/checkpoint.pt"
fi
[ -f "$PROGRESS" ] || echo "utc,steps,machine" > "$PROGRESS"
while true; do
  chrt --idle 0 nice -n 19 python -m decode_mem.train --config "$CONFIG" --out "$RUN" \
    --device cpu --threads "${THREADS:-1}" --quiet || { echo "piece failed (exit $?)"; sleep 60; }
  steps=$(python -c "import sys, torch; print(torch.load(sys.argv[1], map_location='cpu', weights_only=False)['meta']['step'])" "$RUN/checkpoint.pt" 2>/dev/null || echo 0)
  # the weights-only snapshot a later machine continues from (commit it now and then; it replaces the last one)
  python -c "import sys; from decode_mem.train.resume import save_weights_snapshot as s; s(sys.argv[1], sys.argv[2])" \
    "$RUN/checkpoint.pt" "$SNAPSHOT" 2>/dev/null
  echo "$(date -u +%FT%TZ),$steps,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) x$(nproc)" >> "$PROGRESS"
  echo "$(date -u +%FT%TZ) steps done: $steps"
  [ "$steps" -ge "$STEPS" ] && break
done
