#!/usr/bin/env bash
# Session 23, second call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; at most ~3 minutes: failed
# starts left the session ~270 s of device time after s23a).
# 1. Memcheck of the landed default on every edge shape (s23a ran gpu_fast, racecheck, synccheck and initcheck on
#    it; session 22's memcheck was of the build before the ws_release fold-in).
# 2. The padding skips' racecheck stall (s23a: GEMM1's, not deterministic): GEMM1 instrumented alone with a sleep
#    between mbarrier polls (WS_EXP_WAIT_BACKOFF, ns), then without it, then with it again if there is time. If the backoff
#    runs finish in seconds while the plain one stalls, the stall is racecheck recording the polls.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s23b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
SKIPS="WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1"
race_gemm1() { # label, timeout, extra defines
    echo "-- skips' build, GEMM1 instrumented alone, $1"
    MOE_FAST_DEFINES="$SKIPS $3" sanitize_ws racecheck $2 10 --kernel-name kne=ws_gemm1_swiglu
    cp $OUT/cs-racecheck.log "$OUT/race-$1.log"
}
sanitize_ws memcheck 100 ""
race_gemm1 backoff-1 30 WS_EXP_WAIT_BACKOFF=64
race_gemm1 plain 30
[ $SECONDS -lt 120 ] && race_gemm1 backoff-2 30 WS_EXP_WAIT_BACKOFF=64
echo total ${SECONDS}s
