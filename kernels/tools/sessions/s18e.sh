#!/usr/bin/env bash
# Session 18, last call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): the final build (the A/B
# variants removed): every gpu_fast test, the layer tests, compute-sanitizer memcheck of the ws engine's edge
# shapes, then both presets against the PyTorch baseline twice.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s18e}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
gpu_fast_all
layer_tests .gpu/bin 120
memcheck_ws
baselines 250 final-1
mkdir -p $OUT/1 && mv $OUT/bench-*.log $OUT/1/ 2>/dev/null
baselines 400 final-2
echo total ${SECONDS}s
