#!/usr/bin/env bash
# Session 30, second call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; ~7 minutes; no step
# starts after UNTIL s, default 380). The default kernels as in s29a (PTX unchanged); bench-gpu now draws its
# inputs from a normal distribution by default (--inputs normal, as the baseline's torch.randn), where every
# earlier run drew them uniform.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s30a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
REQUIRE_GPU=1 timeout 60 .gpu/bin/gpu_fast --test-threads=1 device_random_inputs_have_their_distribution 2>&1 | grep -E "^test |test result|panicked"
export AB_HEAT=3000 AB_UNTIL=${UNTIL:-380}
# 1. Under the power cap the tensor cores' joules depend on the operands' bits (s29a: WS_EXP_NO_STORE left
#    zeros in the buffers and every GEMM reading them ran 9-16% faster). Our inputs were uniform, the
#    baseline's normal: A (normal, the new default) against B (uniform, every earlier run), both presets.
ab qwen3-30b-a3b 10 inputs-uniform "INPUTS=uniform"
ab qwen3-235b-a22b 6 inputs-uniform-235b "INPUTS=uniform"
# 2. gemm1's epilogue (s29a: 19% of gemm1's time under heat, and gemm1's inputs X, W13 are real in that A/B):
#    its A boxes' bytes (WS_EXP_NO_A_STORE: H alone written), the SwiGLU math (WS_EXP_NO_A_MATH: A's boxes
#    written with no SwiGLU), everything but the global writes (WS_EXP_NO_TMA_ISSUE). Experiments: B's outputs
#    are wrong and its check fails; read gemm1's time only (the kernels after it read other operands).
ab qwen3-30b-a3b 10 no-a-store "MOE_FAST_DEFINES=WS_EXP_NO_A_STORE"
ab qwen3-30b-a3b 10 no-a-math "MOE_FAST_DEFINES=WS_EXP_NO_A_MATH"
ab qwen3-30b-a3b 10 no-tma-issue "MOE_FAST_DEFINES=WS_EXP_NO_TMA_ISSUE"
# 3. against the baseline with the new inputs: the burst (the issue's own method), then heated, both presets
for heat in 0 3000; do
    for p in qwen3-30b-a3b qwen3-235b-a22b; do
        [ $SECONDS -gt ${UNTIL:-380} ] && break
        gpu_watch h$heat-$p; bench_round $p $heat h$heat-$p; gpu_watch_stop
    done
done
echo "total ${SECONDS}s"
