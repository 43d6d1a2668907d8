#!/usr/bin/env bash
# Session 18, last call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): the final build (the A/B
# variants removed): every gpu_fast test, the layer tests, compute-sanitizer memcheck of the ws engine's edge
# shapes, then both presets against the PyTorch baseline twice.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s18e}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
REQUIRE_GPU=1 timeout 200 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
echo "== gpu_fast (all) rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast.log | cut -c1-300 | head -8
layer_tests .gpu/bin 120
MOE_FAST_ENGINES=ws timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 \
    .gpu/bin/gpu_fast --test-threads=1 fast_layer_matches_the_oracle_on_edge_shapes > $OUT/cs-memcheck.log 2>&1
echo "== memcheck (ws engine, edge shapes) rc $? at ${SECONDS}s"; grep -E "ERROR SUMMARY|test result" $OUT/cs-memcheck.log | head -3
baselines 250 final-1
mkdir -p $OUT/1 && mv $OUT/bench-*.log $OUT/1/ 2>/dev/null
baselines 400 final-2
echo total ${SECONDS}s
