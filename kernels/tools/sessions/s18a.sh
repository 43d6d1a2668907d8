#!/usr/bin/env bash
# Session 18, first A/B (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): the leaner gather
# producers (WsGatherA: one 64-bit add and one cp.async per row of a whole k-tile; WsWgrad: one index load,
# one 32x32->64 multiply-add and one cp.async per line) against the previous code (WS_OLD_GATHER), with the
# row copies first (the default: GEMM1 gathers, dA_raw and the weight gradients read copies) and with every
# gather inside the GEMMs (MOE_FAST_GATHER_FIRST=0); then gpu_fast on the new code.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s18a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
AB_UNTIL=100 ab qwen3-30b-a3b 10 old-30b "MOE_FAST_DEFINES=WS_OLD_GATHER=1"
AB_UNTIL=160 ab qwen3-30b-a3b 10 gf0-30b "MOE_FAST_GATHER_FIRST=0"
MOE_FAST_GATHER_FIRST=0 AB_UNTIL=220 ab qwen3-30b-a3b 8 gf0old-30b "MOE_FAST_DEFINES=WS_OLD_GATHER=1"
AB_UNTIL=300 ab qwen3-235b-a22b 5 gf0-235b "MOE_FAST_GATHER_FIRST=0"
if [ $SECONDS -lt 330 ]; then
  REQUIRE_GPU=1 timeout 200 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
  echo "== gpu_fast (all) rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast.log | cut -c1-300 | head -8
fi
echo total ${SECONDS}s
