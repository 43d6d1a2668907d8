#!/usr/bin/env bash
# Session 20 (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): two no-code A/Bs on 235b, whose 1.5x
# sits at the baseline machines' spread: the row GEMMs' tiles in one group per expert (TileOrder::Experts, 6.7 GB
# less HBM traffic per pass, B/A 0.996 over 8 rounds in session 19), and every persistent GEMM dynamic (the
# weight gradients too; 3-4% slower in session 14, before sessions 15-19's changes).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s20d}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
AB_UNTIL=400
ab qwen3-235b-a22b 12 235b-expert "MOE_FAST_RASTER_M=expert"
ab qwen3-235b-a22b 10 235b-dynall "MOE_FAST_DYNAMIC=all"
ab qwen3-30b-a3b 12 30b-dynall "MOE_FAST_DYNAMIC=all"
echo total ${SECONDS}s
