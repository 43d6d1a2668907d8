#!/usr/bin/env bash
# Session 31: only on an H200 (the card), the burst rounds of both presets against the shared baseline
# (the issue's own method; ~2.5 minutes); on any other card it stops at once. Stage first; carry [".gpu"].
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s31d}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
    *H200*) BASELINE_HEAT=0 baselines 300 burst-h200 ;;
    *) echo "not an H200: nothing run" ;;
esac
echo "total ${SECONDS}s"
