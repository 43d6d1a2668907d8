#!/usr/bin/env bash
# Session 22, second build (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; ~7 minutes): the new
# defaults, every lane releasing dA_raw's side tiles (s22a: racecheck clean on cases 10, 11, 12, 14, where the
# __syncwarp fix left WAR hazards on case 14) and the padding skips outside dX (WS_SKIP_EMPTY_WG=2,
# WS_SKIP_EMPTY_K=1: s22a B/A 0.991 on 30b, 0.997 on 235b). The default PTX is byte-identical to s22a's
# `MOE_FAST_DEFINES="WS_SIDE_LANE_RELEASE=1 WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1"` build (plain and clustered).
# Every gpu_fast test, racecheck and memcheck of the default, a round against the PyTorch baseline, synccheck and
# initcheck (last run in session 4), and a second round if there is time.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s22b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
gpu_fast_all
racecheck_ws
memcheck_ws
baselines 300 final-1
sanitize_ws synccheck
sanitize_ws initcheck
baselines 400 final-2
echo total ${SECONDS}s
