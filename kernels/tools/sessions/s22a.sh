#!/usr/bin/env bash
# Session 22, first call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; ~6 minutes).
# 1. WS_SIDE_LANE_RELEASE=1 (built in session 21, never run on a GPU): racecheck of the ws engine on four edge
#    cases, where the default still has 36 hazard reports in ws_rows_bmn (s21b); every gpu_fast test and memcheck
#    with it; its cost on both presets (A = with it, B = the default). If racecheck is clean, gpu_fast passes and
#    the cost is nil: make it the default (fast_ws.cu) and drop the __syncwarp path.
# 2. WS_SKIP_EMPTY_WG=2 (the warpgroup skip everywhere but dX, which it slowed in s21a/s21b) on both presets.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s22a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
export MOE_FAST_DEFINES=WS_SIDE_LANE_RELEASE=1
racecheck_ws
gpu_fast_all
memcheck_ws
AB_UNTIL=330
ab qwen3-30b-a3b 10 30b-lane "MOE_FAST_DEFINES=WS_SIDE_LANE_RELEASE=0"
ab qwen3-235b-a22b 6 235b-lane "MOE_FAST_DEFINES=WS_SIDE_LANE_RELEASE=0"
unset MOE_FAST_DEFINES
ab qwen3-30b-a3b 10 30b-skip2 "MOE_FAST_DEFINES=WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1"
ab qwen3-235b-a22b 8 235b-skip2 "MOE_FAST_DEFINES=WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1"
echo total ${SECONDS}s
