#!/usr/bin/env bash
# Session 20, last call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): the landed build (the
# clustered GEMMs can now take the dynamic tile queue; the default is unclustered and its kernels are
# unchanged) against the PyTorch baseline, both presets twice, every gpu_fast test, the layer tests.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s20c}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
gpu_fast_all
baselines 260 final-1
mkdir -p $OUT/1 && mv $OUT/bench-*.log $OUT/1/ 2>/dev/null
baselines 420 final-2
layer_tests .gpu/bin 520
echo total ${SECONDS}s
