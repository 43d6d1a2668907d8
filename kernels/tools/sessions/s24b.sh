#!/usr/bin/env bash
# Session 24, second call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; at most ~9 minutes).
# The build: s24a's, with programmatic dependent launch taken out again (s24a: B/A 0.9999 on 30b, no gain).
# The candidate default: the padding skips with the skipping warpgroup's sleep between mbarrier polls (CAND),
# whose GEMM1 finished racecheck in 21 s with 0 hazards in s24a while the skips without the sleep ran out of
# 40 s again.
# 1. Every gpu_fast test with CAND (bitwise across engines and runs, against the oracle); racecheck of CAND on
#    cases 10, 11, 12, 14 with every kernel instrumented.
# 2. CAND against the default on both presets (interleaved A/B), then one round of CAND against the PyTorch
#    baseline on each preset.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s24b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
CAND="WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1 WS_SKIP_WAIT_BACKOFF=64"
MOE_FAST_DEFINES="$CAND" gpu_fast_all
MOE_FAST_DEFINES="$CAND" sanitize_ws racecheck 90
AB_UNTIL=300 ab qwen3-30b-a3b 12 30b-cand "MOE_FAST_DEFINES=$CAND"
AB_UNTIL=330 ab qwen3-235b-a22b 6 235b-cand "MOE_FAST_DEFINES=$CAND"
MOE_FAST_DEFINES="$CAND" sanitize_ws synccheck 40
MOE_FAST_DEFINES="$CAND" sanitize_ws initcheck 40
MOE_FAST_DEFINES="$CAND" baselines 440 s24b-cand
echo total ${SECONDS}s
