#!/usr/bin/env bash
# Session 19, third call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): consumer warpgroup 1
# started WS_EXP_LAG_NS later than warpgroup 0 (a lag that nothing but a starved stage resets), so that one
# warpgroup's epilogue overlaps the other's wgmma instead of both leaving the tensor cores idle at once.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s19c}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
AB_UNTIL=300
ab qwen3-30b-a3b 10 30b-lag1000 "MOE_FAST_DEFINES=WS_EXP_LAG_NS=1000"
ab qwen3-30b-a3b 10 30b-lag3000 "MOE_FAST_DEFINES=WS_EXP_LAG_NS=3000"
ab qwen3-235b-a22b 6 235b-lag1000 "MOE_FAST_DEFINES=WS_EXP_LAG_NS=1000"
ab qwen3-235b-a22b 6 235b-lag3000 "MOE_FAST_DEFINES=WS_EXP_LAG_NS=3000"
echo total ${SECONDS}s
