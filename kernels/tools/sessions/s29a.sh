#!/usr/bin/env bash
# Session 29, second call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; ~6 minutes; stops
# starting rounds at UNTIL s, default 380).
# s28a ran on an H200 (the first since session 12): heated, 30b 1.58x and 235b 1.35x, lower than on the H100s
# (1.73x, 1.48x): our pass took the same time on both cards while compiled torch ran 9-10% faster on the H200.
# 1. The issue's own method on the H200: the burst after the warm-up (no heat), both presets, against the
#    shared baseline.
# 2. Heated A/Bs of the one row-gather choice left untried under heat: dY's rows copied by their own kernel
#    before dA_raw (MOE_FAST_DY_ROWS_FROM_DA=0: dA_raw then reads both operands by TMA, as cuBLAS does at
#    1.06 pJ/FLOP against our dA_raw's 1.52 in s28a), on 30b and 235b; then the padding skips on 30b.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s29a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
export AB_HEAT=3000 AB_UNTIL=${UNTIL:-380}  # the short 30b A/Bs first (the device budget was nearly spent)
ab qwen3-30b-a3b 20 dy-rows-copied "MOE_FAST_DY_ROWS_FROM_DA=0"
# 3. How much of each GEMM's excess over cuBLAS is its epilogue's output: B writes no output at all
#    (WS_EXP_NO_STORE, an experiment: B's results are wrong and its oracle check fails; read the per-kernel
#    times, which under heat are the joules at the cap).
ab qwen3-30b-a3b 10 no-store "MOE_FAST_DEFINES=WS_EXP_NO_STORE"
for p in qwen3-30b-a3b qwen3-235b-a22b; do
    [ $SECONDS -gt ${UNTIL:-380} ] && break
    gpu_watch burst-$p; bench_round $p 0 burst-$p; gpu_watch_stop
done
ab qwen3-235b-a22b 10 dy-rows-copied-235b "MOE_FAST_DY_ROWS_FROM_DA=0"
ab qwen3-30b-a3b 20 skips "MOE_FAST_DEFINES=WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1"
echo "total ${SECONDS}s"
