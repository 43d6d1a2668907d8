#!/usr/bin/env bash
# Session 33, the check of the build with every SwiGLU quotient by rcp.approx.f32 (the div.rn path deleted;
# PTX byte-identical to 42fbb36's -DSWIGLU_RCP=1, which s32a A/B'd) and fc_swiglu_bwd_rows by cvt.rn.bf16x2:
# every gpu_fast test, racecheck on the ws engine's edge cases 10 and 11, memcheck on all of them, the layer
# API's GPU tests, then (time left) a heated round of 30b against the baseline. Stage first
# (bash kernels/tools/stage_gpu.sh); carry [".gpu"]; ~8-9 minutes. At most 8 files in $OUT.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s33a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_fast_all
RACE_CASES=10,11 sanitize_ws racecheck 150
sanitize_ws memcheck 120 ""
layer_tests .gpu/bin 380
[ $SECONDS -lt 420 ] && bench_round qwen3-30b-a3b 3000 heated-30b
echo "total ${SECONDS}s"
