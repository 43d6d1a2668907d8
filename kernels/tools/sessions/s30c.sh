#!/usr/bin/env bash
# Session 30, fourth call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; ~2.5 minutes; no A/B
# starts after UNTIL s, default 150). Leaves at most 8 files in $OUT.
# s30b (seeded, heated): without the global writes the GEMMs gain 1.4-7%, without the whole epilogue 5-21%;
# the difference is the consumers' box fills and barriers. Which part, 30b heated (experiments 1-3 race or
# store unfilled boxes: B's outputs are wrong; read the GEMMs' times):
# 1. WS_EXP_NO_BOX_SYNC: no named barrier between a box's fill and its TMA store;
# 2. WS_EXP_NO_FILL: no cvt/stmatrix (the boxes stored as the slots hold them);
# 3. WS_STAGES=3 WS_STAGE_OUT_BYTES=32768: two boxes in flight per warpgroup instead of one (a real
#    configuration: outputs should be bitwise A's), measured in the burst in session 7 (slower), not heated;
# 4. WS_EXP_NO_READ_WAIT: no wait for the previous box's TMA read before the barrier.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s30c}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
export AB_HEAT=3000 AB_UNTIL=${UNTIL:-150}
ab qwen3-30b-a3b 10 no-box-sync "MOE_FAST_DEFINES=WS_EXP_NO_BOX_SYNC"
ab qwen3-30b-a3b 10 no-fill "MOE_FAST_DEFINES=WS_EXP_NO_FILL"
ab qwen3-30b-a3b 10 stages3-out32k "MOE_FAST_DEFINES=WS_STAGES=3 WS_STAGE_OUT_BYTES=32768"
ab qwen3-30b-a3b 10 no-read-wait "MOE_FAST_DEFINES=WS_EXP_NO_READ_WAIT"
echo "total ${SECONDS}s"
