#!/usr/bin/env bash
# The wide generalist (train_generalist_2d_wide.yaml) trained in the background (pipelines/train_background.sh): on
# a 2-core Xeon 105-113 steps a minute per piece with THREADS=2 on a machine left to it, against about 86 on one
# thread (the progress CSV's rows). The shipped data/models/default_2d_wide.pt was trained this way (its pieces:
# default_2d_wide_progress.csv); export a finished run with
# python -m decode_mem.export runs/generalist_2d_wide --out data/models/default_2d_wide.
#   nohup bash pipelines/train_wide_background.sh > runs/generalist_2d_wide.out 2>&1 &
exec bash "$(dirname "$0")/train_background.sh" pipelines/train_generalist_2d_wide.yaml runs/generalist_2d_wide \
  data/models/snapshots/default_2d_wide_snapshot.pt data/models/default_2d_wide_progress.csv 30000
