#!/usr/bin/env bash
# Session 17, a last A/B (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): the backward's operands
# gathered inside the GEMMs (MOE_FAST_GATHER_FIRST=0: dA_raw gathers dY's rows by cp.async like GEMM1, the weight
# gradients gather theirs through the index ring) against the row copies first (the default), on the current
# kernels (session 7's 2.40 against 1.37 ms for grad_w13 predates the TMA stores and the tile queue).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s17g}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
AB_UNTIL=200 ab qwen3-30b-a3b 12 gf0-30b "MOE_FAST_GATHER_FIRST=0"
AB_UNTIL=200 ab qwen3-235b-a22b 6 gf0-235b "MOE_FAST_GATHER_FIRST=0"
echo total ${SECONDS}s
