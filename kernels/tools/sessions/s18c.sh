#!/usr/bin/env bash
# Session 18 (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): dA_raw gathering dY's rows and
# writing them on for grad_w2 (MOE_FAST_DY_ROWS_FROM_DA, on by default) and the consumers' proxy fence only on
# stages cp.async wrote: gpu_fast (which now also runs the copied dY rows against the written ones), the layer
# tests, compute-sanitizer memcheck of the ws engine's edge cases, then A/Bs on both presets.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s18c}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
gpu_fast_all
layer_tests .gpu/bin 120
memcheck_ws
AB_UNTIL=330 ab qwen3-30b-a3b 12 dyda-30b "MOE_FAST_DY_ROWS_FROM_DA=0"
AB_UNTIL=380 ab qwen3-30b-a3b 12 fence-30b "MOE_FAST_DEFINES=WS_FENCE_ALWAYS=1"
AB_UNTIL=430 ab qwen3-235b-a22b 6 dyda-235b "MOE_FAST_DY_ROWS_FROM_DA=0"
echo total ${SECONDS}s
