#!/usr/bin/env bash
# Session 19, last call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): the landed build (dA_raw's
# row stores through ws_copy_box; TileOrder::Experts available, not the default) against the PyTorch baseline,
# both presets twice, then the layer tests.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s19d}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
baselines 200 final-1
mkdir -p $OUT/1 && mv $OUT/bench-*.log $OUT/1/ 2>/dev/null
baselines 380 final-2
layer_tests .gpu/bin 470
echo total ${SECONDS}s
