#!/usr/bin/env bash
# For branch s15-fused-dA (not main): the SwiGLU backward epilogue staged through shared memory
# (wg_swiglu_bwd_staged: about 6,100 instructions instead of the direct version's 43,500, which s15b.sh measured at
# 2.97 ms for dA on 30b). Prepared in session 15, not run (no device time left). `git checkout s15-fused-dA`,
# stage (bash kernels/tools/stage_gpu.sh), device call with carry [".gpu"]. Compare dA+swiglu_bwd with main's
# dA_raw + swiglu_bwd_rows (30b, H100: 0.691 + 0.478 ms in s15b).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s15c}; mkdir -p $OUT
B="--tokens 16384 --engines ws --reps 10"
show() { grep -E "^fast|oracle|^\||speedup|^  [a-z]|memory" $1 | grep -v route | cut -c1-160 | head -26; }
timeout 60 .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b $B --check-tokens 1 --check-wgrad 32 > $OUT/quick-30b.log 2>&1
echo "== quick 30b rc $? at ${SECONDS}s"; show $OUT/quick-30b.log
REQUIRE_GPU=1 timeout 100 .gpu/bin/gpu_fast --test-threads=1 edge_shapes > $OUT/gpu_fast.log 2>&1
echo "== gpu_fast (edge shapes) rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast.log | cut -c1-300 | head -6
timeout 120 .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b $B --check-tokens 2 --check-wgrad 128 \
    --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-30b.log 2>&1
echo "== bench 30b rc $? at ${SECONDS}s"; show $OUT/bench-30b.log
timeout 150 .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b $B --check-tokens 1 --check-wgrad 32 \
    --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-235b.log 2>&1
echo "== bench 235b rc $? at ${SECONDS}s"; show $OUT/bench-235b.log
. kernels/tools/sessions/ab_lib.sh
AB_UNTIL=380 ab qwen3-30b-a3b 12 30-dgrad-dyn "MOE_FAST_DYNAMIC=ws_gemm1_swiglu,ws_rows,ws_rows_bmn,ws_dgrad_bmn"
layer_tests .gpu/bin 500
if [ $SECONDS -lt 440 ]; then
  REQUIRE_GPU=1 timeout 150 .gpu/bin/gpu_fast --test-threads=1 random_shapes the_dynamic_tile_scheduler refuses > $OUT/gpu_fast-rest.log 2>&1
  echo "== gpu_fast (the other tests) rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast-rest.log | cut -c1-300 | head -6
fi
echo total ${SECONDS}s
