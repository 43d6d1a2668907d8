#!/usr/bin/env bash
# Session 16, fourth call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]). The tile order now a
# run-time choice (FastGemmParams.raster_m; the layer groups 8 row tiles, row tile fastest, where an expert's
# weights exceed 16 MiB: 235b's GEMM1 and dX):
# 1. gpu_fast (all four tests: raster 3 in every case, raster 8 with each scheduler), layer tests;
# 2. the default against the baseline, 30b and 235b;
# 3. A/B 235b MOE_FAST_RASTER_M=0 (B: the old order everywhere); A/B MOE_FAST_CLUSTERED=ws_wgrad on both presets.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s16d}; mkdir -p $OUT
REQUIRE_GPU=1 timeout 170 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
echo "== gpu_fast rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast.log | cut -c1-300 | head -8
. kernels/tools/sessions/ab_lib.sh
layer_tests .gpu/bin 200
baselines 330 default
AB_UNTIL=420 ab qwen3-235b-a22b 8 235-raster0 "MOE_FAST_RASTER_M=0"
AB_UNTIL=450 ab qwen3-235b-a22b 8 235-cl-wgrad "MOE_FAST_CLUSTERED=ws_wgrad"
AB_UNTIL=480 ab qwen3-30b-a3b 16 30-cl-wgrad "MOE_FAST_CLUSTERED=ws_wgrad"
echo total ${SECONDS}s
