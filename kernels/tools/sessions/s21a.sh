#!/usr/bin/env bash
# Session 21, first call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): confirm that racecheck is
# clean after session 20's fix (dA_raw's side tiles released after a __syncwarp; s20e had 36 hazard reports in
# ws_rows_bmn, s20f's racecheck hit its time limit), then memcheck and every gpu_fast test.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s21a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
racecheck_ws
memcheck_ws
gpu_fast_all
echo total ${SECONDS}s
