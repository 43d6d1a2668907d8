#!/usr/bin/env bash
# Prepared in session 14 for the next device call (stage first: bash kernels/tools/stage_gpu.sh):
# 1. the per-kernel dynamic default against the PyTorch baseline on 30b (s14f's 30b run was cut);
# 2. WS_DYN_AHEAD=1 (claim the next tile one tile ahead): gpu_fast with it, then A/B against the default, with
#    the default choice of dynamic GEMMs and with every GEMM dynamic (does the early claim remove dA_raw's and
#    the weight gradients' 3-9% loss under the queue?);
# 3. compute-sanitizer memcheck and racecheck on the scheduler's test (tiles > SMs, the queue and its reset).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s15a}; mkdir -p $OUT
timeout 150 .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --check-tokens 2 \
    --check-wgrad 128 --reps 10 --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-30b.log 2>&1
echo "== bench 30b rc $? at ${SECONDS}s"
grep -E "^fast|oracle|^\||speedup|^  [a-z]" $OUT/bench-30b.log | grep -v route | cut -c1-160 | head -24
MOE_FAST_DEFINES="WS_DYN_AHEAD=1" REQUIRE_GPU=1 timeout 150 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast-ahead.log 2>&1
echo "== gpu_fast WS_DYN_AHEAD=1 rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast-ahead.log | head -6
. kernels/tools/sessions/ab_lib.sh
ab qwen3-235b-a22b 8 235-ahead "MOE_FAST_DEFINES=WS_DYN_AHEAD=1"
ab qwen3-235b-a22b 8 235-ahead-all "MOE_FAST_DEFINES=WS_DYN_AHEAD=1; MOE_FAST_DYNAMIC=all"
ab qwen3-30b-a3b 16 30-ahead-all "MOE_FAST_DEFINES=WS_DYN_AHEAD=1; MOE_FAST_DYNAMIC=all"
CS=/usr/local/cuda/bin/compute-sanitizer
for tool in memcheck racecheck; do
    [ $SECONDS -gt 480 ] && break
    timeout 110 $CS --tool $tool --error-exitcode 9 .gpu/bin/gpu_fast --test-threads=1 \
        the_dynamic_tile_scheduler_changes_no_bits > $OUT/cs-$tool.log 2>&1
    echo "== compute-sanitizer $tool (scheduler test) rc $? at ${SECONDS}s"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result" $OUT/cs-$tool.log | head -3
done
echo "total ${SECONDS}s"
