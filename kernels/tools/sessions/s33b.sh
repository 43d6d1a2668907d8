#!/usr/bin/env bash
# Session 33, second call: the layer API's GPU tests of the same build, then the rounds against the PyTorch
# baseline: on an H200 the burst (the issue's own method), on any card heated 3 s first (the power-capped
# steady state). Stage first; carry [".gpu"]; ~6 minutes; no round starts after UNTIL s (default 420).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s33b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
UNTIL=${UNTIL:-420}
nvidia-smi --query-gpu=name --format=csv,noheader
layer_tests .gpu/bin 60
h200_burst $UNTIL burst
baselines $UNTIL heated
echo "total ${SECONDS}s"
