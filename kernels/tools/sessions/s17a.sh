#!/usr/bin/env bash
# Prepared in session 16 for the next session's first call (stage first: bash kernels/tools/stage_gpu.sh; carry
# [".gpu"]):
# 1. s16g.sh: the landed default (no kept X rows, WS_PARTIAL_STAGED=2, grouped tile order for large experts)
#    against the baseline on both presets, gpu_fast's edge shapes (its not-kept-X-rows loop is new);
# 2. gpu_fast's other tests, compute-sanitizer memcheck on the scheduler test;
# 3. where the weight gradients' time goes on 235b against 30b: the same bench with their epilogue removed
#    (WS_EXP_NO_STORE: wrong results on purpose, times only) and with their MMA removed (WS_EXP_NO_MMA).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s17a}; mkdir -p $OUT
OUT=$OUT bash kernels/tools/sessions/s16g.sh
REQUIRE_GPU=1 timeout 120 .gpu/bin/gpu_fast --test-threads=1 random_shapes refuses dynamic > $OUT/gpu_fast-rest.log 2>&1
echo "== gpu_fast (other tests) rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast-rest.log | cut -c1-300 | head -5
# compute-sanitizer memcheck on the scheduler test (now also the grouped tile order under each scheduler)
if [ $SECONDS -lt 300 ]; then
  timeout 110 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/bin/gpu_fast --test-threads=1 \
      the_dynamic_tile_scheduler_changes_no_bits > $OUT/cs-memcheck.log 2>&1
  echo "== compute-sanitizer memcheck (scheduler test) rc $? at ${SECONDS}s"; grep -E "ERROR SUMMARY|test result" $OUT/cs-memcheck.log | head -3
fi
for p in qwen3-235b-a22b qwen3-30b-a3b; do
  for d in "" WS_EXP_NO_STORE WS_EXP_NO_MMA; do
    [ $SECONDS -gt 520 ] && break
    MOE_FAST_DEFINES="$d" timeout 60 .gpu/bin/moe-oracle bench-gpu --preset $p --tokens 16384 --engines ws --reps 5 \
        --check-tokens 0 > $OUT/split-$p-${d:-default}.log 2>&1
    echo "== $p [${d:-default}] rc $? at ${SECONDS}s"; grep -E "^fast forward\+|gemm|wgrad|dX_rows|dA_raw" $OUT/split-$p-${d:-default}.log | cut -c1-80
  done
done
echo total ${SECONDS}s
