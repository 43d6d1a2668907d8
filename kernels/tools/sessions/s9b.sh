#!/usr/bin/env bash
# Session 9, second call: where the clustered GEMMs (WS_CLUSTER=2) lose their time. s9a.sh's cycle counts showed
# their main loops ~40% slower per k-tile than the default's, with the same cycles waiting for full stages.
# 30b variants (fast_ws.cu, "Experiments on where the clustered GEMMs' time goes"): no multicast and no remote
# arrivals; multicast with local releases only (timing only: results wrong); the two arrivals from two lanes;
# relaxed arrivals. Then cycle counts of the first two, and gpu_fast on the candidate releases.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export REQUIRE_GPU=1
OUT=${OUT:-/tmp/s9b}; mkdir -p $OUT
exec > >(tee $OUT/summary.txt) 2>&1
b() { timeout 60 .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps ${R:-10} \
    --check-tokens 1 --check-wgrad 32 2>&1 | grep -E "fast forward|^  [gdws]|oracle|error|wsclk|wsspan" | grep -v "in clusters" | cut -c1-150; }
C="WS_CLUSTER=2"
for d in "" "$C" "$C WS_EXP_CLUSTER_NO_MC" "$C WS_EXP_CLUSTER_LOCAL_RELEASE" "$C WS_RELEASE_LANES" "$C WS_CLUSTER_ARRIVE_RELAXED" \
    "$C WS_RELEASE_LANES WS_CLUSTER_ARRIVE_RELAXED"; do
    echo "=== [$d] at ${SECONDS}s"; MOE_FAST_DEFINES="$d" b
done
for d in "$C WS_EXP_CLUSTER_NO_MC" "$C WS_EXP_CLUSTER_LOCAL_RELEASE"; do
    [ $SECONDS -gt 400 ] && break
    echo "=== clocks [$d] at ${SECONDS}s"; R=3 MOE_FAST_DEFINES="$d WS_EXP_CLOCKS" b > $OUT/clk.log
    grep -E "^  [gdws]" $OUT/clk.log; grep -E "wsclk|wsspan" $OUT/clk.log | tail -30 | grep -E "blk 0 wg 0|wsspan"
done
if [ $SECONDS -lt 450 ]; then
    s=$SECONDS
    MOE_FAST_ENGINES=ws MOE_FAST_DEFINES="$C WS_RELEASE_LANES" timeout 100 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
    echo "== gpu_fast [$C WS_RELEASE_LANES] (ws engine) rc $? $((SECONDS - s)) s: $(grep 'test result' $OUT/gpu_fast.log)"
    grep -E "panicked|FAILED" $OUT/gpu_fast.log | head -5
fi
echo "total ${SECONDS}s"
