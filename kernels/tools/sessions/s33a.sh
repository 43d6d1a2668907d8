#!/usr/bin/env bash
# Session 33, first check of the build with every SwiGLU quotient by rcp.approx.f32 (the div.rn path deleted;
# PTX byte-identical to 42fbb36's -DSWIGLU_RCP=1, which s32a A/B'd) and fc_swiglu_bwd_rows by cvt.rn.bf16x2:
# every gpu_fast test, then racecheck on the ws engine's edge cases 10, 11, 12, 14 and memcheck on all of them.
# Stage first (bash kernels/tools/stage_gpu.sh); carry [".gpu"]; ~8 minutes. At most 8 files in $OUT.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s33a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_fast_all
sanitize_ws racecheck 200
sanitize_ws memcheck 150 ""
echo "total ${SECONDS}s"
