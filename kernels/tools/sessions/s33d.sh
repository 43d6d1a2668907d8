#!/usr/bin/env bash
# Session 33, fourth call (run in session 34 as calls s33d and s34a, the second after the dH bound change): the
# GPU tests again after the SwiGLU bounds changed (2b58265: `act_bound` now covers
# an f32 kernel's evaluation, and both GPU checks use it for A; the kernels are unchanged): every gpu_fast test
# and the layer tests; on an H200 then the burst rounds of both presets. Stage first; carry [".gpu"];
# ~3 minutes (~5 on an H200).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s33d}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_fast_all
layer_tests .gpu/bin 400
h200_burst 400 burst
echo "total ${SECONDS}s"
