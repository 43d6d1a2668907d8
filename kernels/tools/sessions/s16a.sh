#!/usr/bin/env bash
# Prepared in session 15 for the next call on main (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]):
# WS_PARTIAL_STAGED=1, partial row groups (and GEMM1 when I % 128 != 0) copied out of the staging boxes by the
# threads instead of the direct epilogue (GEMM1 11,016 -> 7,064 SASS instructions, GEMM2 / dX 3,256 -> about 1,600;
# the default build's PTX is byte-identical to session 14's). 1. gpu_fast with it (bitwise the plain wgmma
# engine, edge shapes with I % 128 != 0 and partial tiles); 2. A/B against the default on both presets (the
# A/B also demands bitwise outputs); 3. the default against the baseline on 30b, if time is left.
# Then the fused dA epilogue: `git checkout s15-fused-dA`, stage again, kernels/tools/sessions/s15c.sh.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s16a}; mkdir -p $OUT
MOE_FAST_DEFINES="WS_PARTIAL_STAGED=1" REQUIRE_GPU=1 timeout 150 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast-staged.log 2>&1
echo "== gpu_fast WS_PARTIAL_STAGED=1 rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast-staged.log | cut -c1-300 | head -6
. kernels/tools/sessions/ab_lib.sh
AB_UNTIL=300 ab qwen3-30b-a3b 16 30-partial-staged "MOE_FAST_DEFINES=WS_PARTIAL_STAGED=1"
AB_UNTIL=300 ab qwen3-235b-a22b 8 235-partial-staged "MOE_FAST_DEFINES=WS_PARTIAL_STAGED=1"
if [ $SECONDS -lt 420 ]; then
  timeout 150 .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 10 --check-tokens 2 \
      --check-wgrad 128 --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-30b.log 2>&1
  echo "== bench 30b rc $? at ${SECONDS}s"
  grep -E "^fast|oracle|^\||speedup|^  [a-z]" $OUT/bench-30b.log | grep -v route | cut -c1-160 | head -24
fi
echo total ${SECONDS}s
