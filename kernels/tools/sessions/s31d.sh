#!/usr/bin/env bash
# Session 31: only on an H200 (the card), the burst rounds of both presets against the shared baseline
# (the issue's own method; ~2.5 minutes); on any other card it stops at once. Stage first; carry [".gpu"].
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s31d}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
h200_burst 300 burst-h200
echo "total ${SECONDS}s"
