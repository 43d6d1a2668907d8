#!/usr/bin/env bash
# Session 9, first call: gpu_fast on the committed default (GEMM1's rows of X copied first is one of the paths it
# compares bitwise); GEMM1 reading X's rows copied into expert order first (MOE_FAST_GEMM1_GATHER_FIRST=1)
# against gathering them in its loads, two rounds; cycle counts of the clustered GEMMs (WS_CLUSTER=2
# WS_EXP_CLOCKS) beside the default's; then both presets against the PyTorch baseline.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export REQUIRE_GPU=1
OUT=${OUT:-/tmp/s9a}; mkdir -p $OUT
s=$SECONDS
timeout 100 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
echo "== gpu_fast rc $? $((SECONDS - s)) s: $(grep 'test result' $OUT/gpu_fast.log)"
grep -E "panicked|FAILED" $OUT/gpu_fast.log | head -5
b() { timeout 60 .gpu/bin/moe-oracle bench-gpu --preset ${P:-qwen3-30b-a3b} --tokens 16384 --engines ws --reps ${R:-10} \
    --check-tokens 1 --check-wgrad 32 2>&1 | grep -E "fast forward|^  [gdws]|oracle|error|wsclk|wsspan" | cut -c1-150; }
for r in 1 2; do
    for g in 0 1; do echo "=== GEMM1_GATHER_FIRST=$g round $r at ${SECONDS}s"; MOE_FAST_GEMM1_GATHER_FIRST=$g b; done
done
for d in "WS_EXP_CLOCKS" "WS_CLUSTER=2 WS_EXP_CLOCKS"; do
    # (the cycle counts of the last forward+backward: six GEMMs, four consumer warpgroups and one span line each)
    echo "=== [$d] at ${SECONDS}s"; R=3 MOE_FAST_DEFINES="$d" b > $OUT/clk.log; grep -E "^  [gdws]" $OUT/clk.log; grep -E "wsclk|wsspan" $OUT/clk.log | tail -30
done
bench() { # preset
    [ $SECONDS -gt 470 ] && return
    timeout 110 .gpu/bin/moe-oracle bench-gpu --preset $1 --tokens 16384 --engines ws --check-tokens 2 \
        --check-wgrad 128 --reps 10 --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-$1.log 2>&1
    echo "== bench $1 rc $? at ${SECONDS}s"
    grep -E "^  |^fast|oracle|^\||speedup|selective|kept|device memory" $OUT/bench-$1.log | grep -v route | cut -c1-150
}
bench qwen3-30b-a3b
bench qwen3-235b-a22b
echo "total ${SECONDS}s"
