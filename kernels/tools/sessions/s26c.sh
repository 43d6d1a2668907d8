#!/usr/bin/env bash
# Session 26, one call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; ~5-7 minutes; stops starting
# runs at UNTIL s, default 400). Question: is the 30b ratio's spread between calls and machines (1.72x-1.92x over four H100s)
# the GPU's power state during the short timed bursts? Session 26's baseline round gave per-kernel medians about
# s25a's (sum 7.66 against 7.84 ms) while the unprofiled pass differed by 8% (7.57 against 7.03 ms).
# For each preset, the standard round (`--heat-ms 0`, the shared baseline) and a heated one (`--heat-ms 3000`:
# 3 s of the same work back to back before each timed phase, for our layer and, through
# .gpu/bench/torch_moe_heated.py, for the PyTorch baseline), with the SM clock and power logged (gpu_watch):
# the 30b pair twice, then 235b's.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s26c}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
round() { # preset heat_ms label
    [ $SECONDS -gt ${UNTIL:-400} ] && { echo "== $3: skipped (time)"; return; }
    local script=.gpu/bench/torch_moe_baseline.py; [ $2 -gt 0 ] && script=.gpu/bench/torch_moe_heated.py
    gpu_watch $3
    timeout 200 .gpu/bin/moe-oracle bench-gpu --preset $1 --tokens 16384 --engines ws --reps 10 --check-tokens 1 \
        --check-wgrad 32 --heat-ms $2 --baseline $script > $OUT/bench-$3.log 2>&1
    echo "== $3 ($1, --heat-ms $2) rc $? at ${SECONDS}s"
    gpu_watch_stop
    grep -E "^fast forward|^heat|oracle check|sum of the|^\| torch|speedup" $OUT/bench-$3.log | cut -c1-150
    grep '^baseline' $OUT/bench-$3.log | sed 's/"gpu".*//' | cut -c1-150
}
round qwen3-30b-a3b 0 30b-h0
round qwen3-30b-a3b 3000 30b-h3000
round qwen3-30b-a3b 0 30b-h0-b
round qwen3-30b-a3b 3000 30b-h3000-b
round qwen3-235b-a22b 3000 235b-h3000
round qwen3-235b-a22b 0 235b-h0
echo "total ${SECONDS}s"
