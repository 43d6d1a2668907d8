#!/usr/bin/env bash
# Session 18 (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): dY's rows written on by dA_raw's
# consumer warpgroups while their wgmma runs (the default) against the producer writing them 3 k-tiles behind
# its loads (WS_SIDE_PRODUCER) and against the gather_dy copy (MOE_FAST_DY_ROWS_FROM_DA=0); gpu_fast first;
# then both presets against the PyTorch baseline while the call has time.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s18d}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
gpu_fast_all
AB_UNTIL=150 ab qwen3-30b-a3b 12 prod-30b "MOE_FAST_DEFINES=WS_SIDE_PRODUCER=1"
AB_UNTIL=200 ab qwen3-30b-a3b 12 dyda-30b "MOE_FAST_DY_ROWS_FROM_DA=0"
AB_UNTIL=250 ab qwen3-235b-a22b 6 dyda-235b "MOE_FAST_DY_ROWS_FROM_DA=0"
baselines 420 s18d
echo total ${SECONDS}s
