#!/usr/bin/env bash
# Session 18, after the review (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): dA_raw's row stores
# through ws_copy_box (was a second copy of it, ws_side_rows) and WsWgrad::load's two branches through one
# template: every gpu_fast test, memcheck of the ws engine's edge shapes, the layer tests.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s18j}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
gpu_fast_all
memcheck_ws
layer_tests .gpu/bin 110
echo total ${SECONDS}s
