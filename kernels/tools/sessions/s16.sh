#!/usr/bin/env bash
# Prepared in session 15: everything pending in one device call (the device refuses many starts).
# Stage both builds first:
#   bash kernels/tools/stage_gpu.sh && bash kernels/tools/stage_ref.sh s15-fused-dA
# then a device call with carry [".gpu"]:  bash kernels/tools/sessions/s16.sh
# 1. the fused dA epilogue (branch s15-fused-dA, .gpu/s15-fused-dA/bin): gpu_fast edge shapes (bitwise across
#    engines, the oracle), then main's and the branch's benches back to back, twice, on 30b (per-kernel:
#    dA_raw + swiglu_bwd_rows on main against dA+swiglu_bwd on the branch);
# 2. main's WS_PARTIAL_STAGED=1: gpu_fast with it, A/B against the default;
# 3. the branch's layer tests (layer_api, gpu_layer);
# 4. the baseline on 30b and 235b (main's binary), each followed by the branch's bench of the same preset.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s16}; mkdir -p $OUT
M=.gpu/bin; F=.gpu/s15-fused-dA/bin
B="--tokens 16384 --engines ws --reps 10"
show() { grep -E "^fast|oracle|^\||speedup|^  (gemm|dA|swiglu|wgrad|dX|gather|combine|undispatch)|memory" $1 | cut -c1-150 | head -24; }
REQUIRE_GPU=1 timeout 100 $F/gpu_fast --test-threads=1 edge_shapes > $OUT/fused-gpu_fast.log 2>&1
echo "== fused: gpu_fast edge shapes rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/fused-gpu_fast.log | cut -c1-300 | head -4
for round in 1 2; do
  for side in main fused; do
    bin=$M; [ $side = fused ] && bin=$F
    timeout 60 $bin/moe-oracle bench-gpu --preset qwen3-30b-a3b $B --check-tokens 1 --check-wgrad 32 > $OUT/$side-30b-$round.log 2>&1
    echo "== $side 30b round $round rc $? at ${SECONDS}s"; show $OUT/$side-30b-$round.log | grep -E "^fast|dA|swiglu|oracle|memory"
  done
done
MOE_FAST_DEFINES="WS_PARTIAL_STAGED=1" REQUIRE_GPU=1 timeout 100 $M/gpu_fast --test-threads=1 edge_shapes > $OUT/staged-gpu_fast.log 2>&1
echo "== main WS_PARTIAL_STAGED=1: gpu_fast edge shapes rc $? at ${SECONDS}s"; grep -E "test result|panicked" $OUT/staged-gpu_fast.log | cut -c1-300 | head -3
. kernels/tools/sessions/ab_lib.sh
AB_UNTIL=300 ab qwen3-30b-a3b 16 30-partial-staged "MOE_FAST_DEFINES=WS_PARTIAL_STAGED=1"
layer_tests $F 330
for p in qwen3-30b-a3b qwen3-235b-a22b; do
  [ $SECONDS -gt 420 ] && break
  timeout 170 $M/moe-oracle bench-gpu --preset $p $B --check-tokens 1 --check-wgrad 32 --baseline .gpu/bench/torch_moe_baseline.py > $OUT/main-$p-baseline.log 2>&1
  echo "== main $p with the baseline rc $? at ${SECONDS}s"; show $OUT/main-$p-baseline.log
  timeout 60 $F/moe-oracle bench-gpu --preset $p $B --check-tokens 1 --check-wgrad 32 > $OUT/fused-$p.log 2>&1
  echo "== fused $p rc $? at ${SECONDS}s"; show $OUT/fused-$p.log | grep -E "^fast|dA|swiglu|oracle"
done
echo total ${SECONDS}s
