#!/usr/bin/env bash
# Session 30, second call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; ~6 minutes; no round
# starts after UNTIL s, default 360). The default kernels as in s29a (PTX unchanged); two new experiment switches.
# s29a asked for an H200 and ran on an H100. The issue's targets are on an H200 by the shared baseline's own
# method (the burst after its warm-up), which has never run on an H200 for this engine (session 29's H200 call
# was heated). So: the burst rounds of both presets, then the heated rounds, with the GPU's clock and power.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s30a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
# 1. s29a (heated, H100): without any output stores (WS_EXP_NO_STORE) gemm1 took 19% less time, the other GEMMs
#    5-16% less; per GB written, gemm1's epilogue cost ~0.49 ms against ~0.2 for the plain bf16 stores. Which
#    part of gemm1's epilogue: its A boxes' bytes (WS_EXP_NO_A_STORE: H alone written), the SwiGLU math
#    (WS_EXP_NO_A_MATH: A's boxes written with no SwiGLU), or everything but the global writes
#    (WS_EXP_NO_TMA_ISSUE). Experiments: B's outputs are wrong and its oracle check fails; read gemm1's times.
export AB_HEAT=3000 AB_UNTIL=120
ab qwen3-30b-a3b 10 no-a-store "MOE_FAST_DEFINES=WS_EXP_NO_A_STORE"
ab qwen3-30b-a3b 10 no-a-math "MOE_FAST_DEFINES=WS_EXP_NO_A_MATH"
ab qwen3-30b-a3b 10 no-tma-issue "MOE_FAST_DEFINES=WS_EXP_NO_TMA_ISSUE"
# 2. the issue's own method (burst) and the heated steady state, both presets
for heat in 0 3000; do
    for p in qwen3-30b-a3b qwen3-235b-a22b; do
        [ $SECONDS -gt ${UNTIL:-360} ] && break
        gpu_watch h$heat-$p; bench_round $p $heat h$heat-$p; gpu_watch_stop
    done
done
echo "total ${SECONDS}s"
