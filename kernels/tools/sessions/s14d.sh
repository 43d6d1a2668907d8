#!/usr/bin/env bash
# Session 14, one call for everything (the device was scarce: six refused starts cost a third of the budget):
# gpu_fast with WS_DYNAMIC=1; A/B of WS_DYNAMIC=1 against the fixed order on 235b and 30b (bench-gpu --ab);
# then, with the faster of the two on 235b, both presets against the PyTorch baseline in the same call, and
# gpu_layer + layer_api.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s14d}; mkdir -p $OUT
echo "== gpu_fast with WS_DYNAMIC=1"
MOE_FAST_DEFINES="WS_DYNAMIC=1" REQUIRE_GPU=1 timeout 150 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
echo "rc $? at ${SECONDS}s"; grep -E "test result|panicked|FAILED" $OUT/gpu_fast.log | head -8
ab() { # preset reps label setting
    local s=$SECONDS
    timeout 130 .gpu/bin/moe-oracle bench-gpu --preset $1 --tokens 16384 --engines ws --reps $2 --check-tokens 1 \
        --check-wgrad 16 --ab "$4" > $OUT/ab-$3.log 2>&1
    echo "=== $1 [$4] rc $? $((SECONDS - s)) s"
    grep -E "^A/B|^B/A|gemm1|wgrad|dX_rows|dA_raw|gemm2|^outputs|^oracle|rror" $OUT/ab-$3.log | cut -c1-150
}
ab qwen3-235b-a22b 10 235-dyn "MOE_FAST_DEFINES=WS_DYNAMIC=1"
[ $SECONDS -lt 200 ] && ab qwen3-30b-a3b 16 30-dyn "MOE_FAST_DEFINES=WS_DYNAMIC=1"
D=""
if grep -q "outputs: B's bitwise A's" $OUT/ab-235-dyn.log &&
   awk '/^B\/A per round/ { exit !($5 + 0 < 0.99) }' $OUT/ab-235-dyn.log; then D="WS_DYNAMIC=1"; fi
echo "== chosen MOE_FAST_DEFINES=[$D] at ${SECONDS}s"
bench() { # preset, latest start (s)
    [ $SECONDS -gt $2 ] && return
    MOE_FAST_DEFINES="$D" timeout 160 .gpu/bin/moe-oracle bench-gpu --preset $1 --tokens 16384 --engines ws --check-tokens 2 \
        --check-wgrad 128 --reps 10 --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-$1.log 2>&1
    echo "== bench $1 rc $? at ${SECONDS}s"
    grep -E "^fast|oracle|^\||speedup|ratio|baseline|torch|^  [a-z]|^GPU" $OUT/bench-$1.log | grep -v route | cut -c1-160 | head -30
}
bench qwen3-30b-a3b 300
bench qwen3-235b-a22b 330
for t in gpu_layer layer_api; do
    [ $SECONDS -gt 480 ] && break
    MOE_FAST_DEFINES="$D" REQUIRE_GPU=1 timeout 40 .gpu/bin/$t --test-threads=1 > $OUT/$t.log 2>&1
    echo "== $t rc $? at ${SECONDS}s"; grep -E "test result|panicked|FAILED" $OUT/$t.log | head -5
done
echo "total ${SECONDS}s"
