#!/usr/bin/env bash
# Session 14, last call: the GPU tests with REQUIRE_GPU=1 on the committed defaults, then both presets against
# the PyTorch baseline (plain and compiled) in the same call (s10c's command).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s14c}; mkdir -p $OUT
for t in gpu_fast gpu_layer layer_api; do
    REQUIRE_GPU=1 timeout 150 .gpu/bin/$t --test-threads=1 > $OUT/$t.log 2>&1
    echo "== $t rc $? at ${SECONDS}s"; grep -E "test result|panicked|FAILED" $OUT/$t.log | head -5
done
bench() { # preset
    [ $SECONDS -gt 430 ] && return
    timeout 160 .gpu/bin/moe-oracle bench-gpu --preset $1 --tokens 16384 --engines ws --check-tokens 2 \
        --check-wgrad 128 --reps 10 --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-$1.log 2>&1
    echo "== bench $1 rc $? at ${SECONDS}s"
    grep -E "^fast|oracle|^\||speedup|ratio|baseline|torch|^  [a-z]|^GPU" $OUT/bench-$1.log | grep -v route | cut -c1-160 | head -30
}
bench qwen3-30b-a3b
bench qwen3-235b-a22b
echo "total ${SECONDS}s"
