#!/usr/bin/env bash
# Session 14, first call: the dynamic tile scheduler of the persistent GEMMs (WS_DYNAMIC=1, from
# s13-ws-dynamic.patch) -- correctness (gpu_fast tests with it compiled in), then A/B against the fixed order
# (bench-gpu --ab, interleaved rounds in one process; outputs compared bitwise) on 235b and 30b.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s14a}; mkdir -p $OUT
echo "== gpu_fast with WS_DYNAMIC=1"
MOE_FAST_DEFINES="WS_DYNAMIC=1" REQUIRE_GPU=1 timeout 200 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
echo "rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked|FAILED" $OUT/gpu_fast.log | tail -30
ab() { # preset reps label setting
    [ $SECONDS -gt 480 ] && return
    local s=$SECONDS
    timeout 150 .gpu/bin/moe-oracle bench-gpu --preset $1 --tokens 16384 --engines ws --reps $2 --check-tokens 1 \
        --check-wgrad 16 --ab "$4" > $OUT/ab-$3.log 2>&1
    echo "=== $1 [$4] rc $? $((SECONDS - s)) s"
    grep -E "^A/B|^B/A|gemm1|wgrad|dX_rows|dA_raw|gemm2|gather|^outputs|^oracle|rror|identical|differ" $OUT/ab-$3.log | cut -c1-150
}
ab qwen3-235b-a22b 12 235-dyn "MOE_FAST_DEFINES=WS_DYNAMIC=1"
ab qwen3-30b-a3b 20 30-dyn "MOE_FAST_DEFINES=WS_DYNAMIC=1"
if [ $SECONDS -lt ${S14A_CLOCKS_UNTIL:-470} ]; then
    echo "=== 235b WS_EXP_CLOCKS with WS_DYNAMIC=1 at ${SECONDS}s"
    MOE_FAST_DEFINES="WS_EXP_CLOCKS WS_DYNAMIC=1" timeout 100 .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b --tokens 16384 \
        --engines ws --reps 3 --check-tokens 1 --check-wgrad 16 2>&1 | grep -E "^  [gdws]|wsclk|wsspan|fast forward" | cut -c1-170 | tail -24
fi
echo "total ${SECONDS}s"
