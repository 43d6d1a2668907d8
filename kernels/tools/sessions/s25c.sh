#!/usr/bin/env bash
# Session 25, third call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; at most ~2.7 minutes).
# s25b: with the launches drained, both stalled racecheck runs of CAND on edge case 10 stopped in gemm2
# (ws_rows), 2 of 5 runs (s25a: 2 of 5 too). Hypothesis: lanes of the skipping warpgroup drift apart in their
# per-lane polls under the sanitizer (fast_ws.cu, mbar_wait_warp). Here CAND + WS_SKIP_WAIT_UNIFORM=1 (the
# skipping warpgroup polls warp-uniformly), as many runs as fit.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s25c}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
D="WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1 WS_SKIP_WAIT_BACKOFF=64 WS_SKIP_WAIT_UNIFORM=1"
runs=0; stalls=0
for r in 1 2 3 4 5 6 7 8 9 10; do
    [ $SECONDS -gt 125 ] && break
    lim=32; [ $r -eq 1 ] && lim=50  # the first run compiles the kernels
    MOE_FAST_TRACE_LAUNCHES=1 MOE_FAST_DEFINES="$D" sanitize_ws racecheck $lim 10 | grep -E "^==|SUMMARY|TIMED|worst"
    cp $OUT/cs-racecheck.log "$OUT/race-uniform-$r.log"; runs=$((runs + 1))
    if ! grep -q "RACECHECK SUMMARY" "$OUT/race-uniform-$r.log"; then
        stalls=$((stalls + 1))
        echo "   launches $(grep -c 'fast layer: launch' "$OUT/race-uniform-$r.log"), done $(grep -c 'fast layer: done' "$OUT/race-uniform-$r.log"): $(grep 'fast layer: ' "$OUT/race-uniform-$r.log" | tail -1)"
    fi
done
echo "uniform waits: $stalls stalled of $runs runs; total ${SECONDS}s"
