#!/usr/bin/env bash
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
REQUIRE_GPU=1 timeout 150 .gpu/bin/gpu_fast --test-threads=1 2>&1 | grep -E "test result|panicked|FAILED" | head -5
echo "tests done at ${SECONDS}s"
for d in "" "WS_EXP_CLOCKS" "WS_EXP_CLOCKS WS_EXP_NO_TMA_ISSUE" "WS_EXP_CLOCKS WS_EXP_NO_STORE"; do
  echo "=== [$d] at ${SECONDS}s"
  MOE_FAST_DEFINES="$d" timeout 100 .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 3 --check-tokens 1 --check-wgrad 32 > /tmp/o.log 2>&1
  grep -E "fast forward|^  [gdw]|oracle" /tmp/o.log | cut -c1-150
  grep wsclk /tmp/o.log | tail -24 | sort -k3,3n -k5,5n -k7,7n | awk '!seen[$3" "$5" "$7]++'
done
echo total ${SECONDS}s
