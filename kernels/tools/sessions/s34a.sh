#!/usr/bin/env bash
# Session 34, first device call after the dH bound change (both GPU checks bound the stored dH through
# `act_bound::backward_stored_bf16`, tighter than the old 32 u·scale; the kernels are unchanged): every
# gpu_fast test and the layer tests; on an H200 then the burst rounds of both presets. Stage first; carry
# [".gpu"]; ~3 minutes (~5 on an H200).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s34a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_fast_all
layer_tests .gpu/bin 400
h200_burst 400 burst
echo "total ${SECONDS}s"
