#!/usr/bin/env bash
# Session 21, first call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): every gpu_fast test
# (the scheduler test now also runs WS_SKIP_EMPTY_WG=1 WS_SKIP_EMPTY_K=1, alone and clustered, bitwise against the default), the
# A/B of WS_SKIP_EMPTY_WG=1 (a warpgroup whose 64 rows of a tile are all past the expert's last row issues no
# wgmma) on both presets, memcheck with it, then racecheck of the default build (session 20's race fix, not yet
# confirmed by racecheck: s20e had 36 hazard reports in ws_rows_bmn, s20f's racecheck hit its time limit).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s21a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
gpu_fast_all
AB_UNTIL=220
ab qwen3-30b-a3b 10 30b-skip "MOE_FAST_DEFINES=WS_SKIP_EMPTY_WG=1 WS_SKIP_EMPTY_K=1"
ab qwen3-235b-a22b 6 235b-skip "MOE_FAST_DEFINES=WS_SKIP_EMPTY_WG=1 WS_SKIP_EMPTY_K=1"
MOE_FAST_DEFINES="WS_SKIP_EMPTY_WG=1 WS_SKIP_EMPTY_K=1" memcheck_ws
racecheck_ws
echo total ${SECONDS}s
