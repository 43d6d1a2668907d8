#!/usr/bin/env bash
# Session 20, second call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): the weight gradients'
# gathered-row indices by bulk copies completing on mbarriers (WS_IDX_BULK, the new default) instead of cp.async
# groups shared with the data. Every gpu_fast test (gathering inside the GEMMs bitwise against gathering first,
# NaN-poisoned), memcheck, then A/Bs: the copies (default) against gathering inside (MOE_FAST_GATHER_FIRST=0), and
# with gathering inside, the new index ring against the old (WS_IDX_BULK=0).
# Ran on commit 94753df; the index ring measured slower than the cp.async one and was reverted (70d48ce), so
# WS_IDX_BULK no longer exists on main: check out 94753df to rerun this.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s20b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
gpu_fast_all
memcheck_ws
AB_UNTIL=470
ab qwen3-30b-a3b 10 30b-inside "MOE_FAST_GATHER_FIRST=0"
MOE_FAST_GATHER_FIRST=0 ab qwen3-30b-a3b 8 30b-inside-oldring "MOE_FAST_DEFINES=WS_IDX_BULK=0"
ab qwen3-235b-a22b 6 235b-inside "MOE_FAST_GATHER_FIRST=0"
echo total ${SECONDS}s
