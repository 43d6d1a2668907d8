#!/usr/bin/env bash
# Session 18 (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): the weight gradients' index ring by
# plain loads two k-tiles ahead (new) against cp.async in the data's commit groups (WS_IDX_CP_ASYNC), both with
# the rows gathered inside (MOE_FAST_GATHER_FIRST=0); then gathered (new) against the copies (the default);
# gpu_fast first (it runs every persistent case gathered inside too).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s18f}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
gpu_fast_all
MOE_FAST_GATHER_FIRST=0 AB_UNTIL=150 ab qwen3-30b-a3b 10 idx-30b "MOE_FAST_DEFINES=WS_IDX_CP_ASYNC=1"
AB_UNTIL=200 ab qwen3-30b-a3b 10 gf0-30b "MOE_FAST_GATHER_FIRST=0"
AB_UNTIL=250 ab qwen3-235b-a22b 5 gf0-235b "MOE_FAST_GATHER_FIRST=0"
echo total ${SECONDS}s
