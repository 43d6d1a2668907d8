#!/usr/bin/env bash
# Session 31 (stage first; carry [".gpu"]; ~2 minutes): heated A/Bs of WS_WAIT_HINT=1000000 (every mbarrier
# try_wait with a 1 ms suspend-time hint: the waiting thread sleeps in the instruction instead of polling; s31f
# found the consumers' poll loop 13% of dX's executed instructions). Outputs must be bitwise A's.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s31g}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
export AB_HEAT=3000 AB_UNTIL=${UNTIL:-200}
ab qwen3-30b-a3b 10 wait-hint "MOE_FAST_DEFINES=WS_WAIT_HINT=1000000"
ab qwen3-235b-a22b 6 wait-hint-235b "MOE_FAST_DEFINES=WS_WAIT_HINT=1000000"
echo "total ${SECONDS}s"
