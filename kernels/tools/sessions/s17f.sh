#!/usr/bin/env bash
# Session 17, last call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): the final build (the f32
# dA_raw kernels removed): every gpu_fast test, the layer tests, then both presets against the baseline again.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s17f}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
REQUIRE_GPU=1 timeout 200 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
echo "== gpu_fast (all) rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast.log | cut -c1-300 | head -8
layer_tests .gpu/bin 300
baselines 330 final
echo total ${SECONDS}s
