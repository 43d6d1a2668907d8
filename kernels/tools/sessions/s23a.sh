#!/usr/bin/env bash
# Session 23, first call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; at most ~7 minutes).
# 1. One round against the PyTorch baseline on each preset (the default: lane releases, no skips; none in s22).
# 2. Why racecheck stalls on the padding skips' build (session 22: s22b and s22c, case 10 unfinished after 300 s
#    and 40 s, while each skip alone and neither finish in 6.4-6.8 s; each kernel of the both-skips build is
#    PTX-identical to one of a single-skip build). Repeats (is it flaky?), once without the driver's JIT cache,
#    then racecheck instrumenting one kernel at a time (the others run uninstrumented) to find the launch that stalls.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s23a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
SKIPS="WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1"
race10() { # label, then extra compute-sanitizer options
    [ $SECONDS -gt 520 ] && return
    local label=$1 s=$SECONDS; shift
    MOE_FAST_DEFINES="$SKIPS" MOE_FAST_CASES=10 MOE_FAST_ENGINES=ws timeout 40 /usr/local/cuda/bin/compute-sanitizer --tool racecheck "$@" \
        .gpu/bin/gpu_fast --test-threads=1 --nocapture fast_layer_matches_the_oracle_on_edge_shapes > "$OUT/race-$label.log" 2>&1
    echo "== racecheck case 10, skips, $label: rc $? $((SECONDS - s)) s: $(grep -E 'case seed|RACECHECK SUMMARY' $OUT/race-$label.log | tr '\n' ' ' | cut -c1-160)"
}
baselines 200 s23a
race10 rep1
race10 rep2
CUDA_CACHE_DISABLE=1 race10 nocache
for k in ws_wgrad ws_rows_bmn ws_rows ws_gemm1_swiglu; do race10 only-$k --kernel-name kne=$k; done
echo total ${SECONDS}s
