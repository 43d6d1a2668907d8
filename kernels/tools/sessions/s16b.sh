#!/usr/bin/env bash
# Session 16, second call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]):
# 1. gpu_fast edge shapes: now also X's rows kept from forward (`use_saved_x_rows`) bitwise the default, and a
#    backward after X changed must not read the stale kept rows;
# 2. A/B pairs (bench-gpu --ab, outputs must be bitwise): MOE_FAST_SAVE_X_ROWS=1 (GEMM1 reads X's rows by TMA
#    from a copy kept for grad_w13: no gather_x in the backward), WS_PARTIAL_STAGED=2 (partial row groups of
#    GEMM2 and dX through the staging boxes, GEMM1 as before), both;
# 3. both together against the baseline on 30b and 235b (the candidate default, set by the environment);
# 4. ncu: L2 hit rate of 235b's GEMM2 and dX (s14b.sh's question), if time is left.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s16b}; mkdir -p $OUT
REQUIRE_GPU=1 timeout 150 .gpu/bin/gpu_fast --test-threads=1 edge_shapes > $OUT/gpu_fast.log 2>&1
echo "== gpu_fast edge shapes rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast.log | cut -c1-300 | head -4
. kernels/tools/sessions/ab_lib.sh
AB_UNTIL=200 ab qwen3-30b-a3b 16 30-save-x "MOE_FAST_SAVE_X_ROWS=1"
AB_UNTIL=200 ab qwen3-235b-a22b 8 235-save-x "MOE_FAST_SAVE_X_ROWS=1"
AB_UNTIL=230 ab qwen3-30b-a3b 16 30-staged2 "MOE_FAST_DEFINES=WS_PARTIAL_STAGED=2"
AB_UNTIL=230 ab qwen3-235b-a22b 8 235-staged2 "MOE_FAST_DEFINES=WS_PARTIAL_STAGED=2"
AB_UNTIL=260 ab qwen3-30b-a3b 16 30-both "MOE_FAST_SAVE_X_ROWS=1; MOE_FAST_DEFINES=WS_PARTIAL_STAGED=2"
MOE_FAST_SAVE_X_ROWS=1 MOE_FAST_DEFINES=WS_PARTIAL_STAGED=2 baselines 400 "candidate default"
[ $SECONDS -lt 480 ] && ncu_235b ws_rows_bmn 100 dX
echo total ${SECONDS}s
