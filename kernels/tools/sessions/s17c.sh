#!/usr/bin/env bash
# Session 17: dA_raw stored in bf16 (this checkout) against the landed default (the commit before it), one call.
# Stage both first (REF: the commit before the change):
#   bash kernels/tools/stage_gpu.sh && bash kernels/tools/stage_ref.sh REF main-ref
# then a device call with carry [".gpu"]: bash kernels/tools/sessions/s17c.sh
# 1. gpu_fast edge shapes with bf16 dA_raw (every engine bitwise the others, the oracle's bounds);
# 2. old and new back to back on 30b (no baseline: per-kernel times);
# 3. the new build against the PyTorch baseline on both presets (the ratio to record);
# 4. old and new again, 235b then 30b, and the new build's layer tests, while time is left.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s17c}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
N=.gpu/bin; R=.gpu/main-ref/bin
REQUIRE_GPU=1 timeout 80 $N/gpu_fast --test-threads=1 edge_shapes > $OUT/gpu_fast-edge.log 2>&1
echo "== new: gpu_fast edge shapes rc $? at ${SECONDS}s"; grep -E "test result|panicked|rror" $OUT/gpu_fast-edge.log | cut -c1-300 | head -4
run() { # side preset round
  local bin=$N; [ $1 = old ] && bin=$R
  timeout 90 $bin/moe-oracle bench-gpu --preset $2 --tokens 16384 --engines ws --reps 10 --check-tokens 1 --check-wgrad 16 \
      > $OUT/$1-$2-$3.log 2>&1
  echo "== $1 $2 round $3 rc $? at ${SECONDS}s"; grep -E "^fast forward|dA_raw|swiglu_bwd|oracle" $OUT/$1-$2-$3.log | cut -c1-120
}
run old qwen3-30b-a3b 1; run new qwen3-30b-a3b 1
baselines 330 new
for p in qwen3-235b-a22b qwen3-30b-a3b; do [ $SECONDS -gt 480 ] && break; run old $p 2; run new $p 2; done
layer_tests $N 560
echo total ${SECONDS}s
