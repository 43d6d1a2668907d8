#!/usr/bin/env bash
# Session 9, last call: only the weight-gradient GEMM in clusters of two (MOE_FAST_CLUSTERED=ws_wgrad, a second
# module compiled with WS_CLUSTER=2), the row GEMMs as before. gpu_fast (every engine) with it; 30b: it, the
# default, it against the PyTorch baseline; then gpu_layer, layer_api, the demo round trip and memcheck with it.
# (Cut down to fit the session's last device time, after a first try was lost with the machine.)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export REQUIRE_GPU=1
OUT=${OUT:-/tmp/s9d}; mkdir -p $OUT
exec > >(tee $OUT/summary.txt) 2>&1
B=.gpu/bin
W=ws_wgrad
tst() { # name, timeout
    s=$SECONDS
    MOE_FAST_CLUSTERED=$W timeout "$2" $B/$1 --test-threads=1 > "$OUT/$1.log" 2>&1
    echo "== $1 [clustered $W] rc $? $((SECONDS - s)) s: $(grep -E 'test result' "$OUT/$1.log" | tail -1)"
    grep -E "panicked|FAILED" "$OUT/$1.log" | head -5
}
tst gpu_fast 120
b() { # clustered kernels, preset, baseline?
    [ $SECONDS -gt 250 ] && return
    echo "=== $2 clustered [$1] at ${SECONDS}s"
    MOE_FAST_CLUSTERED="$1" timeout 110 $B/moe-oracle bench-gpu --preset $2 --tokens 16384 --engines ws --reps 10 \
        --check-tokens 2 --check-wgrad 128 ${3:+--baseline .gpu/bench/torch_moe_baseline.py} > $OUT/bench.log 2>&1
    grep -E "^  |^fast|oracle|^\||speedup|selective|error" $OUT/bench.log | grep -v route | cut -c1-150
}
P=qwen3-30b-a3b
b $W $P; b none $P; b $W $P 1
tst gpu_layer 40
tst layer_api 30
$B/moe-oracle demo -o "$OUT/demo.safetensors" --save-case "$OUT/case.safetensors" > /dev/null 2>&1
MOE_FAST_CLUSTERED=$W $B/moe-oracle run "$OUT/case.safetensors" --device cuda --kernels fast --intermediates -o "$OUT/cand.safetensors" > "$OUT/demo-run.log" 2>&1
echo "== run --device cuda --kernels fast [clustered $W] rc $?"
$B/moe-oracle check "$OUT/case.safetensors" --candidate "$OUT/cand.safetensors" --recipe bf16 > "$OUT/demo-check.log" 2>&1
echo "== check --recipe bf16 rc $?"
rm -f "$OUT"/*.safetensors
CS=/usr/local/cuda/bin/compute-sanitizer
for tool in memcheck racecheck; do
    left=$((340 - SECONDS)); [ $left -lt 30 ] && break
    s=$SECONDS
    MOE_FAST_CLUSTERED=$W MOE_FAST_ENGINES=ws timeout $left $CS --tool $tool --error-exitcode 9 $B/gpu_fast --test-threads=1 \
        fast_layer_matches_the_oracle_on_edge_shapes > "$OUT/cs-$tool.log" 2>&1
    echo "== compute-sanitizer $tool (ws engine, clustered $W, edge cases) rc $? $((SECONDS - s)) s"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result" "$OUT/cs-$tool.log" | head -3
done
echo "total ${SECONDS}s"
