#!/usr/bin/env bash
# (Ran in session 26, results in BENCHMARKS.md "Session 26". WS_SKIP_WAIT_UNIFORM was removed after it: to rerun the
# script as it ran, check out commit a7365a8.)
# Session 25, prepared for the first call of session 26 (stage first: bash kernels/tools/stage_gpu.sh; carry
# [".gpu"]; at most ~9 minutes; stops starting runs at 380 s). s25a-s25b: racecheck of the padding skips' candidate (CAND) on edge case 10
# gave no verdict in 4 of 10 runs (40-45 s limits); with the launches drained both stalls were in gemm2
# (ws_rows). (On an H200, first the default against the PyTorch baseline, both presets.) Two hypotheses, one variant each, four runs each, then one long run of CAND itself:
#  - lanes of the skipping warp drift apart under the sanitizer: WS_SKIP_WAIT_UNIFORM=1 (warp-vote polls);
#  - no hang, only slowness: racecheck records every poll of the skipping warpgroup, which polls through the
#    other warpgroup's whole main loop: WS_SKIP_WAIT_BACKOFF=1000 (16x fewer polls than CAND's 64 ns);
#  - and CAND itself with a 130 s limit: a verdict after 45 s there means the stall is slowness, not a hang.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s25c}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
gpu=$(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader); echo "$gpu"
# on an H200 (the machine, never given in sessions 13-25) the default against the baseline comes first
case "$gpu" in *H200*) baselines 100 s26-h200-default ;; esac
SKIPS="WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1"
race_runs uniform "$SKIPS WS_SKIP_WAIT_BACKOFF=64 WS_SKIP_WAIT_UNIFORM=1" 4 32
race_runs backoff1000 "$SKIPS WS_SKIP_WAIT_BACKOFF=1000" 4 32
race_runs cand-long "$SKIPS WS_SKIP_WAIT_BACKOFF=64" 3 130  # a run that ends past ~45 s is slow, not hung
echo "total ${SECONDS}s"
