#!/usr/bin/env bash
# Session 23, second call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; at most ~9 minutes).
# Memcheck of the default on every edge shape (s23a ran gpu_fast, racecheck, synccheck and initcheck on this
# session's build, with the ws_release fold-in; session 22's memcheck was of the build before it), then a second
# round against the PyTorch baseline.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s23b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
memcheck_ws
baselines 400 s23b
echo total ${SECONDS}s
