#!/usr/bin/env bash
# Session 14, last call on what device time was left (~5 min): the committed default's checks, most needed
# first: gpu_fast on the per-kernel dynamic default (with the all/none bitwise test), 235b then 30b against
# the PyTorch baseline, gpu_layer and layer_api.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s14f}; mkdir -p $OUT
REQUIRE_GPU=1 timeout 130 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
echo "== gpu_fast rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked|FAILED" $OUT/gpu_fast.log | head -8
bench() { # preset, latest start (s)
    [ $SECONDS -gt $2 ] && return
    timeout 90 .gpu/bin/moe-oracle bench-gpu --preset $1 --tokens 16384 --engines ws --check-tokens 2 \
        --check-wgrad 128 --reps 10 --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-$1.log 2>&1
    echo "== bench $1 rc $? at ${SECONDS}s"
    grep -E "^fast|oracle|^\||speedup|^  [a-z]|^GPU" $OUT/bench-$1.log | grep -v route | cut -c1-160 | head -30
}
bench qwen3-235b-a22b 150
bench qwen3-30b-a3b 175
for t in gpu_layer layer_api; do
    REQUIRE_GPU=1 timeout 20 .gpu/bin/$t --test-threads=1 > $OUT/$t.log 2>&1
    echo "== $t rc $? at ${SECONDS}s"; grep -E "test result|panicked|FAILED" $OUT/$t.log | head -5
done
echo "total ${SECONDS}s"
