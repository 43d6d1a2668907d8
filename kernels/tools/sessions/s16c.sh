#!/usr/bin/env bash
# Session 16, third call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]). The new defaults (X's
# rows kept from the forward, WS_PARTIAL_STAGED=2):
# 1. gpu_fast (all four tests), gpu_layer, layer_api;
# 2. the default against the baseline, 30b and 235b;
# 3. A/B of WS_RASTER_M (row tiles fastest in groups of G, so that the readers of a weight column start together):
#    235b G=8 and 16, 30b G=8;
# 4. ncu on 235b's dX with WS_RASTER_M=8: does the L2 hit rate (71% in s16b) go up?
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s16c}; mkdir -p $OUT
REQUIRE_GPU=1 timeout 170 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
echo "== gpu_fast rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast.log | cut -c1-300 | head -8
. kernels/tools/sessions/ab_lib.sh
layer_tests .gpu/bin 200
baselines 330 default
AB_UNTIL=420 ab qwen3-235b-a22b 8 235-raster8 "MOE_FAST_DEFINES=WS_RASTER_M=8"
AB_UNTIL=440 ab qwen3-30b-a3b 16 30-raster8 "MOE_FAST_DEFINES=WS_RASTER_M=8"
AB_UNTIL=460 ab qwen3-235b-a22b 8 235-raster16 "MOE_FAST_DEFINES=WS_RASTER_M=16"
[ $SECONDS -lt 520 ] && MOE_FAST_DEFINES=WS_RASTER_M=8 ncu_235b ws_rows_bmn 70 "dX WS_RASTER_M=8"
echo total ${SECONDS}s
