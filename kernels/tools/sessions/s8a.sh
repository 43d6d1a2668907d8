#!/usr/bin/env bash
# Session 8, second call: gpu_fast with the new default (GEMM1's branch-free SwiGLU division) and with clusters of
# two (WS_CLUSTER=2, B multicast); 30b variants against the default (outputs bitwise on a golden case, times);
# then 30b and 235b against the PyTorch baseline, default and WS_CLUSTER=2 in the same call (235b under nvidia-smi).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export REQUIRE_GPU=1
OUT=${OUT:-/tmp/s8a}; mkdir -p $OUT
t() {
    s=$SECONDS
    MOE_FAST_DEFINES="$1" timeout $2 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast_$3.log 2>&1
    rc=$?
    echo "== gpu_fast [$1] rc $rc $((SECONDS - s)) s: $(grep 'test result' $OUT/gpu_fast_$3.log)"
    grep -E "panicked|FAILED" $OUT/gpu_fast_$3.log | head -5
    return $rc
}
t "" 100 default
t "WS_CLUSTER=2" 120 cluster && cl=1
V="FC_SWIGLU_BWD_IN_RANGE;WS_SWIGLU_DIV_STANDARD"
[ -n "$cl" ] && V="WS_CLUSTER=2;$V"
LIMIT=330 NO_BENCH=1 BENCH_ONLY=1 VARIANTS="$V" bash kernels/tools/device_call.sh
bench() { # preset, defines, baseline?
    [ $SECONDS -gt 500 ] && return
    MOE_FAST_DEFINES="$2" timeout 110 $3 .gpu/bin/moe-oracle bench-gpu --preset $1 --tokens 16384 --engines ws --check-tokens 2 \
        --check-wgrad 128 --reps 10 ${4:+--baseline .gpu/bench/torch_moe_baseline.py} > $OUT/bench-$1-$2.log 2>&1
    echo "== bench $1 [$2] rc $? at ${SECONDS}s"
    grep -E "^  |^fast|oracle|^\||speedup|busy|clock|power" $OUT/bench-$1-$2.log | grep -v route | cut -c1-150
}
bench qwen3-30b-a3b "" "" 1
[ -n "$cl" ] && bench qwen3-30b-a3b "WS_CLUSTER=2" ""
bench qwen3-235b-a22b "" "bash kernels/tools/smi_during.sh" 1
[ -n "$cl" ] && bench qwen3-235b-a22b "WS_CLUSTER=2" "bash kernels/tools/smi_during.sh"
echo "total ${SECONDS}s"
