#!/usr/bin/env bash
# Session 9, third call: the clustered GEMMs without the wgmma serialisation (ptxas C7520: the branch on `idle`
# around the MMA, removed). gpu_fast (ws engine) on the cluster variants; 30b default against WS_CLUSTER=2 and
# its release variants, two rounds; then both presets against the PyTorch baseline with the round's fastest,
# and 235b with the default beside it.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export REQUIRE_GPU=1
OUT=${OUT:-/tmp/s9c}; mkdir -p $OUT
exec > >(tee $OUT/summary.txt) 2>&1
C="WS_CLUSTER=2"
for d in "$C" "$C WS_RELEASE_LANES"; do
    s=$SECONDS
    MOE_FAST_ENGINES=ws MOE_FAST_DEFINES="$d" timeout 100 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
    echo "== gpu_fast [$d] (ws engine) rc $? $((SECONDS - s)) s: $(grep 'test result' $OUT/gpu_fast.log)"
    grep -E "panicked|FAILED" $OUT/gpu_fast.log | head -5
done
b() { timeout 60 .gpu/bin/moe-oracle bench-gpu --preset ${P:-qwen3-30b-a3b} --tokens 16384 --engines ws --reps 10 \
    --check-tokens 1 --check-wgrad 32 2>&1 | grep -E "fast forward|^  [gdws]|oracle|error" | cut -c1-150; }
best=""; best_ms=99999
for r in 1 2; do
    for d in "" "$C" "$C WS_RELEASE_LANES"; do
        echo "=== [$d] round $r at ${SECONDS}s"; MOE_FAST_DEFINES="$d" b | tee $OUT/b.txt
        ms=$(awk '/fast forward\+backward/ {print int($3 * 1000)}' $OUT/b.txt)
        grep -q "within bounds" $OUT/b.txt && [ -n "$ms" ] && [ "$ms" -lt "$best_ms" ] && { best_ms=$ms; best="$d"; }
    done
done
echo "== fastest: [$best] ($best_ms us)"
bench() { # preset, defines
    [ $SECONDS -gt 480 ] && return
    MOE_FAST_DEFINES="$2" timeout 110 .gpu/bin/moe-oracle bench-gpu --preset $1 --tokens 16384 --engines ws --check-tokens 2 \
        --check-wgrad 128 --reps 10 ${3:+--baseline .gpu/bench/torch_moe_baseline.py} > $OUT/bench.log 2>&1
    echo "== bench $1 [$2] rc $? at ${SECONDS}s"
    grep -E "^  |^fast|oracle|^\||speedup|selective|kept|device memory" $OUT/bench.log | grep -v route | cut -c1-150
}
bench qwen3-30b-a3b "$best" 1
bench qwen3-235b-a22b "$best" 1
[ -n "$best" ] && bench qwen3-235b-a22b ""
echo "total ${SECONDS}s"
