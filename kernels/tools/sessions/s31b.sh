#!/usr/bin/env bash
# (Ran in session 31, logs/s31b. WS_EPI_BORROW was removed afterwards: its code is in commit 51ab0cb.)
# Session 31 (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; ~7 minutes, no step starts after
# UNTIL s, default 420). At most 8 files in $OUT.
# WS_EPI_BORROW=1: the tile's last ring stage lends 24 KiB (three output slots) to each consumer warpgroup's
# epilogue, so that a tile's first three boxes go out without waiting for earlier boxes' reads (s31a: without
# those waits, WS_EXP_NO_READ_WAIT, the GEMMs ran 4-5% faster, pass B/A 0.979, racing).
# 1. heated 30b A/B (outputs must be bitwise A's, oracle check within bounds); 2. every gpu_fast test with it
# (the property tests against the oracle on edge shapes, determinism); 3. 235b; 4. the stage handed back at the
# next tile's first k-tile instead of its second; 5. racecheck of the edge cases with it.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s31b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
UNTIL=${UNTIL:-420}
nvidia-smi --query-gpu=name --format=csv,noheader
export AB_HEAT=3000 AB_UNTIL=$UNTIL
ab qwen3-30b-a3b 10 borrow "MOE_FAST_DEFINES=WS_EPI_BORROW=1"
if [ $SECONDS -lt $((UNTIL - 180)) ]; then
    MOE_FAST_DEFINES=WS_EPI_BORROW=1 gpu_fast_all
fi
ab qwen3-235b-a22b 8 borrow-235b "MOE_FAST_DEFINES=WS_EPI_BORROW=1"
ab qwen3-30b-a3b 10 borrow-kt0 "MOE_FAST_DEFINES=WS_EPI_BORROW=1 WS_EPI_BORROW_KT=0"
if [ $SECONDS -lt $((UNTIL - 60)) ]; then
    MOE_FAST_DEFINES=WS_EPI_BORROW=1 sanitize_ws racecheck $((UNTIL + 100 - SECONDS)) 10,11
fi
echo "total ${SECONDS}s"
