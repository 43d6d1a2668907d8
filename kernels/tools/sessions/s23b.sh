#!/usr/bin/env bash
# Session 23, second call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; at most ~9 minutes).
# The default's remaining sanitizer tools (session 22 ran memcheck on the lane releases, but synccheck and
# initcheck last ran on the default in session 4; the ws_release fold-in is new in this session): memcheck on every
# edge shape, synccheck and initcheck on cases 10, 11, 12, 14; then a second round against the PyTorch baseline.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s23b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
memcheck_ws
sanitize_ws synccheck
sanitize_ws initcheck
baselines 400 s23b
echo total ${SECONDS}s
