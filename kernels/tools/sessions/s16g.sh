#!/usr/bin/env bash
# Session 16, last call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): X's rows are no longer kept
# from the forward by default (issue #6: no permuted copy of X, at most X and H kept), so the final default
# (WS_PARTIAL_STAGED=2, the grouped tile order for large experts) against the baseline on both presets, then
# gpu_fast's edge shapes if time is left (the kept and not-kept paths bitwise).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s16g}; mkdir -p $OUT
for p in qwen3-235b-a22b qwen3-30b-a3b; do
  timeout 80 .gpu/bin/moe-oracle bench-gpu --preset $p --tokens 16384 --engines ws --reps 10 --check-tokens 1 \
      --check-wgrad 16 --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-$p.log 2>&1
  echo "== default $p with the baseline rc $? at ${SECONDS}s"
  grep -E "^fast|^\||speedup|^  [a-z]|memory|oracle" $OUT/bench-$p.log | grep -v route | cut -c1-160 | head -24
done
if [ $SECONDS -lt 110 ]; then
  REQUIRE_GPU=1 timeout 50 .gpu/bin/gpu_fast --test-threads=1 edge_shapes > $OUT/gpu_fast.log 2>&1
  echo "== gpu_fast edge shapes rc $? at ${SECONDS}s"; grep -E "test result|panicked" $OUT/gpu_fast.log | cut -c1-300 | head -3
fi
echo total ${SECONDS}s
