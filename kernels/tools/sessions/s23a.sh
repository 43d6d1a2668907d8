#!/usr/bin/env bash
# Session 23, first call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; at most ~9.5 minutes).
# The build has ws_release's two arrival branches folded into one with a computed count (session 22's review:
# same SASS size, PTX not byte-identical), so it is also the test of that change.
# 1. One round against the PyTorch baseline on each preset (the default: lane releases, no skips; none in s22),
#    every gpu_fast test, racecheck, synccheck and initcheck of the default on cases 10, 11, 12, 14 (the device was
#    hard to get this session: everything that matters in one call, memcheck left to s23b).
# 2. Why racecheck stalls on the padding skips' build (session 22: s22b and s22c, case 10 unfinished after 300 s
#    and 40 s, while each skip alone and neither finish in 6.4-6.8 s; each kernel of the both-skips build is
#    PTX-identical to one of a single-skip build). Repeats (is it flaky?), once without the driver's JIT cache,
#    then racecheck instrumenting one kernel at a time (the others run uninstrumented) to find the launch that stalls.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s23a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
SKIPS="WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1"
race10() { # label, then extra compute-sanitizer options: racecheck of the skips' build on case 10, 40 s
    [ $SECONDS -gt 540 ] && return
    local label=$1; shift
    echo "-- skips' build, $label"
    MOE_FAST_DEFINES="$SKIPS" sanitize_ws racecheck 40 10 "$@"
    cp $OUT/cs-racecheck.log "$OUT/race-$label.log"
}
gpu_fast_all
sanitize_ws racecheck 100; cp $OUT/cs-racecheck.log $OUT/race-default.log
baselines 330 s23a
sanitize_ws synccheck 60
sanitize_ws initcheck 60
race10 rep1
for k in ws_wgrad ws_rows_bmn ws_rows ws_gemm1_swiglu; do race10 only-$k --kernel-name kne=$k; done
CUDA_CACHE_DISABLE=1 race10 nocache
echo total ${SECONDS}s
