#!/usr/bin/env bash
# Session 23, second call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; at most ~7 minutes: the
# session had ~520 s of device time left after s23a).
# 1. Memcheck of the landed default on every edge shape (s23a ran gpu_fast, racecheck, synccheck and initcheck on
#    it; session 22's memcheck was of the build before the ws_release fold-in).
# 2. The padding skips' racecheck stall (s23a: GEMM1's, not deterministic): GEMM1 instrumented alone with a sleep
#    between mbarrier polls (WS_EXP_WAIT_BACKOFF, ns), twice, then once more without it. If the backoff
#    runs finish in seconds while the plain one stalls, the stall is racecheck recording the polls.
# 3. A second round against the PyTorch baseline, if there is time.
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
memcheck_ws
race_gemm1 backoff-1 40 WS_EXP_WAIT_BACKOFF=64
race_gemm1 backoff-2 40 WS_EXP_WAIT_BACKOFF=64
race_gemm1 plain 40
baselines 250 s23b
echo total ${SECONDS}s
