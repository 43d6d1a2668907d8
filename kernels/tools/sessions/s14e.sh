#!/usr/bin/env bash
# Session 14, last call: the per-kernel dynamic scheduler default (GEMM1, GEMM2, dX; MOE_FAST_DYNAMIC): gpu_fast
# (with the new all/none bitwise test), both presets against the PyTorch baseline in the same call, gpu_layer
# and layer_api, then (time allowing) A/B against every GEMM dynamic (235b).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s14e}; mkdir -p $OUT
REQUIRE_GPU=1 timeout 170 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
echo "== gpu_fast rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked|FAILED" $OUT/gpu_fast.log | head -8
bench() { # preset, latest start (s)
    [ $SECONDS -gt $2 ] && return
    timeout 160 .gpu/bin/moe-oracle bench-gpu --preset $1 --tokens 16384 --engines ws --check-tokens 2 \
        --check-wgrad 128 --reps 10 --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-$1.log 2>&1
    echo "== bench $1 rc $? at ${SECONDS}s"
    grep -E "^fast|oracle|^\||speedup|ratio|baseline|torch|^  [a-z]|^GPU" $OUT/bench-$1.log | grep -v route | cut -c1-160 | head -30
}
bench qwen3-30b-a3b 200
bench qwen3-235b-a22b 240
for t in gpu_layer layer_api; do
    REQUIRE_GPU=1 timeout 40 .gpu/bin/$t --test-threads=1 > $OUT/$t.log 2>&1
    echo "== $t rc $? at ${SECONDS}s"; grep -E "test result|panicked|FAILED" $OUT/$t.log | head -5
done
if [ $SECONDS -lt ${S14E_AB_UNTIL:-230} ]; then
    timeout 100 .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b --tokens 16384 --engines ws --reps 8 --check-tokens 1 \
        --check-wgrad 16 --ab "MOE_FAST_DYNAMIC=all" > $OUT/ab-235-all.log 2>&1
    echo "=== 235b A default, B MOE_FAST_DYNAMIC=all rc $? at ${SECONDS}s"
    grep -E "^A/B|^B/A|gemm1|wgrad|dX_rows|dA_raw|gemm2|^outputs|^oracle|rror" $OUT/ab-235-all.log | cut -c1-150
fi
echo "total ${SECONDS}s"
