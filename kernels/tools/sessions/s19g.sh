#!/usr/bin/env bash
# Session 19, last call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): the landed build (the copy
# kernels with several loads in flight per thread) : every gpu_fast test, then both presets against the PyTorch
# baseline once.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s19g}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
gpu_fast_all
baselines 330 final-3
echo total ${SECONDS}s
