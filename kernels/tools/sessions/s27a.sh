#!/usr/bin/env bash
# Session 27, one call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; ~5-6 minutes; stops
# starting runs at UNTIL s, default 420).
# In order: the 30b round, the 235b A/B, the 235b round, the 30b A/Bs.
# 1. Joules per pass. Session 27's s26c found our pass 6-9% slower after 3 s of heat and compiled torch
#    unchanged: under the power cap what sets the time is energy. The heated rounds of both presets again,
#    now with NVML's energy counter read around each heat (bench-gpu and torch_moe_heated.py): joules per
#    forward and per forward+backward for our layer, plain torch and compiled torch.
# 2. Whether less HBM traffic pays under heat: `MOE_FAST_RASTER_M=expert` (one tile group per expert: 6.7 GB
#    less HBM per 235b pass, B/A 0.996 without heat in session 19) as heated interleaved A/Bs, 235b then 30b;
#    and whether a third fewer L2-to-shared bytes do: clusters of 2 with the weight tile multicast
#    (`WS_CLUSTER=2`, 4-9% slower in bursts in session 20), heated, on 30b, if time is left.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s27a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
round() { # preset heat_ms label: bench_round (ab_lib.sh) with the GPU's clock and power logged
    [ $SECONDS -gt ${UNTIL:-420} ] && { echo "== $3: skipped (time)"; return; }
    gpu_watch $3
    bench_round "$@"
    gpu_watch_stop
}
export AB_HEAT=3000 AB_UNTIL=${UNTIL:-420}
round qwen3-30b-a3b 3000 30b-h3000
gpu_watch ab-235b; ab qwen3-235b-a22b 20 raster-235b "MOE_FAST_RASTER_M=expert"; gpu_watch_stop
round qwen3-235b-a22b 3000 235b-h3000
gpu_watch ab-30b; ab qwen3-30b-a3b 30 raster-30b "MOE_FAST_RASTER_M=expert"; gpu_watch_stop
gpu_watch ab-cluster; ab qwen3-30b-a3b 30 cluster-30b "MOE_FAST_DEFINES=WS_CLUSTER=2"; gpu_watch_stop
echo "total ${SECONDS}s"
