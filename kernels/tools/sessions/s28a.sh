#!/usr/bin/env bash
# Session 28, one call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; ~6-7 minutes; stops
# starting rounds at UNTIL s, default 400).
# Where the joules go. s27a found both sides at the 700 W cap in forward+backward, the time ratio equal to the
# energy ratio within 2-4%: 2x on 30b needs 4.65 J a pass against our 5.60. So, per kernel:
# 1. `FastLayer::set_repeat` (one kernel launched N times in a row inside a pass) leaves every output bitwise
#    (gpu_fast `repeating_one_kernel_changes_no_output`, every label of every engine): the metering's premise.
# 2. Joules, ms and watts per launch of each kernel, heated (`bench-gpu --heat-ms 3000 --kernel-energy-ms
#    1000`): 30b with the heated baseline, then 235b.
# 3. cuBLAS's joules per FLOP at the same shapes as dense GEMMs, sustained (matmul_ceiling.py, both presets):
#    which of our GEMMs spend more energy per FLOP than cuBLAS, and by how much.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s28a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
REQUIRE_GPU=1 timeout 150 .gpu/bin/gpu_fast repeating_one_kernel_changes_no_output > $OUT/gpu_fast-repeat.log 2>&1
echo "== gpu_fast repeating_one_kernel_changes_no_output rc $? at ${SECONDS}s"; grep -E "test |panicked|result" $OUT/gpu_fast-repeat.log | head -8
if [ -n "${MINI:-}" ]; then  # MINI=1 (~2 minutes, for a nearly spent device budget): 30b only, no baseline
    timeout 100 .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 10 --check-tokens 1 \
        --check-wgrad 16 --heat-ms 3000 --kernel-energy-ms 1000 > $OUT/bench-30b-energy-mini.log 2>&1
    echo "== 30b energy (no baseline) rc $? at ${SECONDS}s"; grep -vE "route|^GPU|^routing|kept for|selective" $OUT/bench-30b-energy-mini.log | cut -c1-200 | head -50
    timeout 60 python3 kernels/tools/matmul_ceiling.py --seconds 1.0 --preset qwen3-30b-a3b > $OUT/cublas-30b.log 2>&1
    echo "== cuBLAS 30b rc $? at ${SECONDS}s"; cut -c1-700 $OUT/cublas-30b.log
    exit 0
fi
round() { # preset label: a heated bench_round with the per-kernel energy, the GPU's clock and power logged
    [ $SECONDS -gt ${UNTIL:-400} ] && { echo "== $2: skipped (time)"; return; }
    gpu_watch $2
    BENCH_EXTRA="--kernel-energy-ms 1000" bench_round $1 3000 $2
    gpu_watch_stop
}
round qwen3-30b-a3b 30b-energy
for p in qwen3-30b-a3b qwen3-235b-a22b; do
    [ $SECONDS -gt ${UNTIL:-400} ] && { echo "== cuBLAS $p: skipped (time)"; continue; }
    gpu_watch cublas-$p
    timeout 120 python3 kernels/tools/matmul_ceiling.py --seconds 1.5 --preset $p > $OUT/cublas-$p.log 2>&1
    echo "== cuBLAS $p rc $? at ${SECONDS}s"; cut -c1-700 $OUT/cublas-$p.log
    gpu_watch_stop
done
round qwen3-235b-a22b 235b-energy
# 4. If time is left: GEMM1 fed by TMA from X's rows copied into expert order first, instead of the producer's
#    cp.async row gather (1024 16-byte copies a stage against one TMA instruction): fewer instructions a FLOP
#    for one more copy kernel; heated A/B on 30b.
export AB_HEAT=3000 AB_UNTIL=${UNTIL:-400}
ab qwen3-30b-a3b 20 gemm1-gather-first "MOE_FAST_GEMM1_GATHER_FIRST=1"
echo "total ${SECONDS}s"
