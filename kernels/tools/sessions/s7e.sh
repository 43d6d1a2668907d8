#!/usr/bin/env bash
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
REQUIRE_GPU=1 timeout 150 .gpu/bin/gpu_fast --test-threads=1 2>&1 | grep -E "test result|panicked|FAILED" | head -5
echo "tests done at ${SECONDS}s"
b() { timeout 90 .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 10 --check-tokens 1 --check-wgrad 32 2>&1 | grep -E "fast forward|^  |oracle" | cut -c1-120 | tr '\n' '|' | sed 's/  */ /g'; echo; }
for round in 1 2; do
  echo "=== default"; b
  echo "=== FC_SWIGLU_BWD_SEPARATE"; MOE_FAST_DEFINES="FC_SWIGLU_BWD_SEPARATE" b
  echo "=== MOE_FAST_GATHER_FIRST=0"; MOE_FAST_GATHER_FIRST=0 b
done
echo "variants done at ${SECONDS}s"
for preset in qwen3-30b-a3b qwen3-235b-a22b; do
  [ $SECONDS -gt 420 ] && break
  timeout 130 .gpu/bin/moe-oracle bench-gpu --preset $preset --tokens 16384 --engines ws --check-tokens 2 --check-wgrad 128 \
     --reps 10 --baseline .gpu/bench/torch_moe_baseline.py > /tmp/bench-$preset.log 2>&1
  echo "== bench $preset rc $? at ${SECONDS}s"
  grep -E "^  |^fast|oracle|^\||speedup|selective|kept|device memory|torch|compiled|plain" /tmp/bench-$preset.log | grep -v route | cut -c1-160
done
echo total ${SECONDS}s
