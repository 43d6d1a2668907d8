#!/usr/bin/env bash
# Session 25, first call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; at most ~9.5 minutes).
# 1. On an H200 (the issue states its targets for one; sessions 13-24 ran on H100s): the default against the
#    PyTorch baseline on each preset, and the skips' candidate (CAND) too; on an H100 the default's round only.
#    The GPU's clocks, temperature and power are logged during the default's round (gpu_watch).
# 2. Where racecheck stalls on CAND (session 24: no verdict in 90 s once, clean in 8.5 + 37 s the next time on
#    the same machine): five runs of case 10 with every kernel instrumented, each launch's label on stderr
#    (MOE_FAST_TRACE_LAUNCHES=1; compute-sanitizer serialises launches, so a stalled run's last label names the
#    kernel in flight), against three runs of the default as the control (never seen to stall).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s25a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
gpu=$(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader); echo "$gpu"
CAND="WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1 WS_SKIP_WAIT_BACKOFF=64"
race_traced() { # label, defines: racecheck of case 10, 40 s, and the last launch when it gives no verdict
    [ $SECONDS -gt 540 ] && return
    echo "-- racecheck case 10, $1"
    MOE_FAST_TRACE_LAUNCHES=1 MOE_FAST_DEFINES="$2" sanitize_ws racecheck 40 10
    cp $OUT/cs-racecheck.log "$OUT/race-$1.log"
    grep -q "RACECHECK SUMMARY" "$OUT/race-$1.log" || echo "   last launch: $(grep 'fast layer: launch' "$OUT/race-$1.log" | tail -1)"
}
case "$gpu" in *H200*)
    gpu_watch default; baselines 170 s25a-default; gpu_watch_stop
    MOE_FAST_DEFINES="$CAND" baselines 330 s25a-cand ;;
*)  gpu_watch default; baselines 100 s25a-default; gpu_watch_stop ;;
esac
for r in 1 2 3 4 5; do race_traced cand-$r "$CAND"; done
for r in 1 2 3; do race_traced default-$r ""; done
echo total ${SECONDS}s
