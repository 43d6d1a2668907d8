#!/usr/bin/env bash
# Session 17, second call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]), on the build with dA_raw in
# bf16 (s17c measured it):
# 1. gpu_fast's other tests (proptest shapes, bad-input refusal, the tile schedulers bitwise), compute-sanitizer
#    memcheck on the scheduler test;
# 2. where the GEMMs' time goes on this H100: 30b (then 235b) with the epilogues removed (WS_EXP_NO_STORE) and
#    with the MMA removed (WS_EXP_NO_MMA): wrong results on purpose, times only; the default under nvidia-smi
#    (is the H100 at its power cap during the GEMMs, as the H200 was in session 7?).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s17d}; mkdir -p $OUT
REQUIRE_GPU=1 timeout 150 .gpu/bin/gpu_fast --test-threads=1 random_shapes refuses dynamic > $OUT/gpu_fast-rest.log 2>&1
echo "== gpu_fast (other tests) rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast-rest.log | cut -c1-300 | head -6
if [ $SECONDS -lt 200 ]; then
  timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/bin/gpu_fast --test-threads=1 \
      the_dynamic_tile_scheduler_changes_no_bits > $OUT/cs-memcheck.log 2>&1
  echo "== compute-sanitizer memcheck (scheduler test) rc $? at ${SECONDS}s"; grep -E "ERROR SUMMARY|test result" $OUT/cs-memcheck.log | head -3
fi
B="--tokens 16384 --engines ws --reps 5 --check-tokens 0"
for p in qwen3-30b-a3b qwen3-235b-a22b; do
  for d in "" WS_EXP_NO_STORE WS_EXP_NO_MMA; do
    [ $SECONDS -gt 400 ] && break
    if [ -z "$d" ]; then
      timeout 80 bash kernels/tools/smi_during.sh .gpu/bin/moe-oracle bench-gpu --preset $p $B > $OUT/split-$p-default.log 2>&1
    else
      MOE_FAST_DEFINES="$d" timeout 80 .gpu/bin/moe-oracle bench-gpu --preset $p $B > $OUT/split-$p-$d.log 2>&1
    fi
    echo "== $p [${d:-default}] rc $? at ${SECONDS}s"
    grep -E "^fast forward\+|gemm|wgrad|dX_rows|dA_raw|nvidia-smi|SM clock|power" $OUT/split-$p-${d:-default}.log | cut -c1-90
  done
done
echo total ${SECONDS}s
