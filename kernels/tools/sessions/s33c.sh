#!/usr/bin/env bash
# Session 33, third call (same build as s33a): the burst rounds of both presets against the shared baseline
# (the issue's own method: 10 reps right after the warm-up), on whatever card comes; on an H200 then the
# heated rounds too, time permitting. Stage first; carry [".gpu"]; ~3 minutes on an H100; no round starts
# after UNTIL s (default 300).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s33c}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
UNTIL=${UNTIL:-300}
nvidia-smi --query-gpu=name --format=csv,noheader
BASELINE_HEAT=0 baselines $UNTIL burst
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in *H200*) baselines $UNTIL heated ;; esac
echo "total ${SECONDS}s"
