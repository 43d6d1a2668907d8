#!/usr/bin/env bash
# Session 24, first call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; at most ~9.5 minutes).
# s23b's plan (every gpu_fast test and memcheck on the landed default, then the skips' GEMM1 racecheck with and
# without sleeps between mbarrier polls), plus, when the device is an H200 (the issue states its targets for
# one; sessions 13-23 ran on H100s), one round against the PyTorch baseline on each preset first.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s24a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
gpu=$(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader); echo "$gpu"
SKIPS="WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1"
CAND="$SKIPS WS_SKIP_WAIT_BACKOFF=64"
race_gemm1() { # label, timeout, extra defines; returns 0 when racecheck gave a verdict in time
    [ $SECONDS -gt 540 ] && return 1
    echo "-- skips' build, GEMM1 instrumented alone, $1"
    MOE_FAST_DEFINES="$SKIPS $3" sanitize_ws racecheck $2 10 --kernel-name kne=ws_gemm1_swiglu
    cp $OUT/cs-racecheck.log "$OUT/race-$1.log"
    grep -q "RACECHECK SUMMARY" "$OUT/race-$1.log"
}
case "$gpu" in *H200*) baselines 200 s24a-h200 ;; esac
gpu_fast_all
sanitize_ws memcheck 120 ""
race_gemm1 skipping-wg-sleeps 40 WS_SKIP_WAIT_BACKOFF=64
race_gemm1 every-wait-sleeps 40 WS_WAIT_BACKOFF=64
race_gemm1 plain 40
case "$gpu" in *H200*) ;; *) baselines 420 s24a-h100 ;; esac
echo total ${SECONDS}s
