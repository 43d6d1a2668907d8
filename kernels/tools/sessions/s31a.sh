#!/usr/bin/env bash
# (Ran in session 31, logs/s31a. WS_MMA_OVERWRITE was removed afterwards: its code is in commit d12f51f.)
# Prepared in session 30 for the next one (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"];
# ~4 minutes on an H100, ~6 on an H200; no step starts after UNTIL s, default 240). At most 8 files in $OUT.
# 1. On an H200 (the card; sessions 13-30 got one once, heated): the issue's own method, the burst
#    after the warm-up against the shared baseline, both presets.
# 2. What s30c could not run (heated 30b A/Bs): two output boxes in flight per warpgroup
#    (WS_STAGES=3 WS_STAGE_OUT_BYTES=32768, a real configuration: outputs bitwise A's; slower in session 7's
#    burst, untested under heat, where the epilogues weigh more), and no wait for the previous box's TMA
#    read (WS_EXP_NO_READ_WAIT, races: read the GEMMs' times only).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s31a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
    *H200*) gpu_watch burst; BASELINE_HEAT=0 baselines ${UNTIL:-240} burst; gpu_watch_stop ;;
esac
export AB_HEAT=3000 AB_UNTIL=${UNTIL:-240}
ab qwen3-30b-a3b 10 stages3-out32k "MOE_FAST_DEFINES=WS_STAGES=3 WS_STAGE_OUT_BYTES=32768"
ab qwen3-30b-a3b 10 no-read-wait "MOE_FAST_DEFINES=WS_EXP_NO_READ_WAIT"
# 3. (prepared in session 30, never run on a GPU) a tile's first wgmma overwrites the accumulators instead of
#    ~56 instructions of zeroing per thread between main loops (WS_MMA_OVERWRITE=1): B's outputs should be
#    bitwise A's and its oracle check pass; if B is faster, run gpu_fast with it before making it the default.
ab qwen3-30b-a3b 10 mma-overwrite "MOE_FAST_DEFINES=WS_MMA_OVERWRITE=1"
echo "total ${SECONDS}s"
