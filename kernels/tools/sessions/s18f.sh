#!/usr/bin/env bash
# Session 18 (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): the weight gradients' index ring by
# plain loads two k-tiles ahead (new) against cp.async in the data's commit groups (WS_IDX_CP_ASYNC), both with
# the rows gathered inside (MOE_FAST_GATHER_FIRST=0); then gathered (new) against the copies (the default);
# gpu_fast first (it runs every persistent case gathered inside too).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s18f}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
REQUIRE_GPU=1 timeout 200 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
echo "== gpu_fast (all) rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast.log | cut -c1-300 | head -8
MOE_FAST_GATHER_FIRST=0 AB_UNTIL=150 ab qwen3-30b-a3b 10 idx-30b "MOE_FAST_DEFINES=WS_IDX_CP_ASYNC=1"
AB_UNTIL=200 ab qwen3-30b-a3b 10 gf0-30b "MOE_FAST_GATHER_FIRST=0"
AB_UNTIL=250 ab qwen3-235b-a22b 5 gf0-235b "MOE_FAST_GATHER_FIRST=0"
echo total ${SECONDS}s
