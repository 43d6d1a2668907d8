#!/usr/bin/env bash
# Session 24, first call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; at most ~9.5 minutes).
# s23b's plan (every gpu_fast test and memcheck on the landed default, then the skips' GEMM1 racecheck with and
# without sleeps between mbarrier polls), plus, when the device is an H200 (the issue states its targets for
# one; sessions 13-23 ran on H100s), one round against the PyTorch baseline on each preset first; and the
# first run of programmatic dependent launch (MOE_FAST_PDL=1): its edge shapes and its A/B on 30b.
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
if [ $SECONDS -lt 430 ]; then
    echo "-- PDL (MOE_FAST_PDL=1): the edge shapes on every engine (all launched with PDL), bitwise across engines and runs, and against the oracle"
    MOE_FAST_PDL=1 REQUIRE_GPU=1 timeout 120 .gpu/bin/gpu_fast --test-threads=1 fast_layer_matches_the_oracle_on_edge_shapes > $OUT/pdl-edge.log 2>&1
    echo "== pdl edge rc $? at ${SECONDS}s"; grep -E "test result|panicked" $OUT/pdl-edge.log | head -3
    AB_UNTIL=470 ab qwen3-30b-a3b 10 30b-pdl "MOE_FAST_PDL=1"
fi
race_gemm1 skipping-wg-sleeps 40 WS_SKIP_WAIT_BACKOFF=64
[ $SECONDS -lt 450 ] && sanitize_ws memcheck 100 ""
race_gemm1 plain 40
case "$gpu" in *H200*) ;; *) baselines 380 s24a-h100 ;; esac
echo total ${SECONDS}s
