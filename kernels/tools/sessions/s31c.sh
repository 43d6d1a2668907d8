#!/usr/bin/env bash
# Session 31 (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; ~5 minutes, no step starts after
# UNTIL s, default 400). At most 8 files in $OUT.
# The default build (kernels' PTX byte-identical to 133b9ce's) against the shared baseline in the same call:
# both presets in the burst after the warm-up (the issue's own method), then both with 3 s of heat first.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s31c}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
UNTIL=${UNTIL:-400}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
BASELINE_HEAT=0 baselines $UNTIL burst
BASELINE_HEAT=3000 baselines $UNTIL heated
echo "total ${SECONDS}s"
