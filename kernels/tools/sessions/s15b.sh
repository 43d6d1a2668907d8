#!/usr/bin/env bash
# Session 15, second call: the SwiGLU backward fused into dA's epilogue (ws_dgrad_bmn; no f32 dA_raw, no
# fc_swiglu_bwd_rows). Stage first (bash kernels/tools/stage_gpu.sh), with the previous commit's binary as
# .gpu/old/moe-oracle. 1. gpu_fast (bitwise ws vs plain wgmma, in-GEMM gathers, recompute; the oracle);
# 2. both presets against the baseline, and the old binary's per-kernel times in the same call;
# 3. A/B: without the L2 prefetch of H, the epilogue's batch of 4 pairs (spills 8 bytes), dA on the dynamic
#    scheduler (30b; then 235b for the prefetch and the scheduler).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s15b}; mkdir -p $OUT
REQUIRE_GPU=1 timeout 150 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
echo "== gpu_fast rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast.log | cut -c1-300 | head -8
B="--tokens 16384 --engines ws --reps 10"
show() { grep -E "^fast|oracle|^\||speedup|^  [a-z]|memory" $1 | grep -v route | cut -c1-160 | head -26; }
timeout 170 .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b $B --check-tokens 2 --check-wgrad 128 \
    --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-30b.log 2>&1
echo "== bench 30b rc $? at ${SECONDS}s"; show $OUT/bench-30b.log
timeout 60 .gpu/old/moe-oracle bench-gpu --preset qwen3-30b-a3b $B --check-tokens 0 > $OUT/old-30b.log 2>&1
echo "== old 30b rc $? at ${SECONDS}s"; show $OUT/old-30b.log
. kernels/tools/sessions/ab_lib.sh
AB_UNTIL=330 ab qwen3-30b-a3b 16 30-noprefetch "MOE_FAST_DEFINES=WS_BWD_PREFETCH=0"
AB_UNTIL=330 ab qwen3-30b-a3b 16 30-batch4 "MOE_FAST_DEFINES=WG_BWD_BATCH=4"
AB_UNTIL=330 ab qwen3-30b-a3b 16 30-dgrad-dyn "MOE_FAST_DYNAMIC=ws_gemm1_swiglu,ws_rows,ws_rows_bmn,ws_dgrad_bmn"
if [ $SECONDS -lt 360 ]; then
  timeout 200 .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b $B --check-tokens 1 --check-wgrad 32 \
      --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-235b.log 2>&1
  echo "== bench 235b rc $? at ${SECONDS}s"; show $OUT/bench-235b.log
fi
if [ $SECONDS -lt 520 ]; then
  timeout 60 .gpu/old/moe-oracle bench-gpu --preset qwen3-235b-a22b $B --check-tokens 0 > $OUT/old-235b.log 2>&1
  echo "== old 235b rc $? at ${SECONDS}s"; show $OUT/old-235b.log
fi
AB_UNTIL=540 ab qwen3-235b-a22b 6 235-noprefetch "MOE_FAST_DEFINES=WS_BWD_PREFETCH=0"
AB_UNTIL=540 ab qwen3-235b-a22b 6 235-dgrad-dyn "MOE_FAST_DYNAMIC=ws_gemm1_swiglu,ws_rows,ws_rows_bmn,ws_dgrad_bmn"
for t in layer_api gpu_layer; do
  [ $SECONDS -gt 560 ] && break
  REQUIRE_GPU=1 timeout 40 .gpu/bin/$t --test-threads=1 > $OUT/$t.log 2>&1
  echo "== $t rc $? at ${SECONDS}s"; grep -E "test result|panicked" $OUT/$t.log | head -3
done
echo total ${SECONDS}s
