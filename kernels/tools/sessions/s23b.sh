#!/usr/bin/env bash
# Session 23's second call, not run then (failed starts left too little device time); the next session's first
# (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; at most ~9 minutes).
# 1. Every gpu_fast test on the landed default (session 23 moved the layer's launches into layer/forward.rs and
#    layer/backward.rs and joined the two weight-gradient launches' parameter setup after s23a ran), and memcheck
#    on every edge shape (s23a ran racecheck, synccheck and initcheck on the kernels; memcheck last ran on the
#    build before the ws_release fold-in).
# 2. The padding skips' racecheck stall (s23a: GEMM1's, not deterministic), GEMM1 instrumented alone on case 10:
#    with a sleep between every mbarrier poll (WS_WAIT_BACKOFF, ns), without it, and with the sleep in the
#    skipping warpgroup's waits only (WS_SKIP_WAIT_BACKOFF, the candidate). If the sleeps finish in seconds and
#    the plain build stalls, the stall is racecheck recording the polls.
# 3. If the candidate finished: the whole racecheck set on the skips with the candidate, then, as time allows,
#    its cost against the default (the skips alone measured B/A 0.991 on 30b, 0.997 on 235b in s22a); its
#    gpu_fast run goes in the next call.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s23b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
SKIPS="WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1"
CAND="$SKIPS WS_SKIP_WAIT_BACKOFF=64"
race_gemm1() { # label, timeout, extra defines; returns 0 when racecheck gave a verdict in time
    echo "-- skips' build, GEMM1 instrumented alone, $1"
    MOE_FAST_DEFINES="$SKIPS $3" sanitize_ws racecheck $2 10 --kernel-name kne=ws_gemm1_swiglu
    cp $OUT/cs-racecheck.log "$OUT/race-$1.log"
    grep -q "RACECHECK SUMMARY" "$OUT/race-$1.log"
}
gpu_fast_all
sanitize_ws memcheck 150 ""
race_gemm1 every-wait-sleeps 40 WS_WAIT_BACKOFF=64
race_gemm1 plain 40
if race_gemm1 skipping-wg-sleeps 40 WS_SKIP_WAIT_BACKOFF=64 && [ $SECONDS -lt 480 ]; then
    echo "-- the candidate ($CAND): racecheck on cases 10, 11, 12, 14, every kernel instrumented"
    MOE_FAST_DEFINES="$CAND" sanitize_ws racecheck 100
    AB_UNTIL=470
    ab qwen3-30b-a3b 10 30b-cand "MOE_FAST_DEFINES=$CAND"
    ab qwen3-235b-a22b 6 235b-cand "MOE_FAST_DEFINES=$CAND"
fi
echo total ${SECONDS}s
