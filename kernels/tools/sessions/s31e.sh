#!/usr/bin/env bash
# Session 31 (stage first; carry [".gpu"]; ~3 minutes): ncu on 235b's dA_raw and dX (both ws_rows_bmn) and on
# cuBLAS's kernel for the dense dX shape (131072 x 4096 x 3072, bf16, through torch), with ncu's default
# clock control (the same locked clock for both): at the same clock, does cuBLAS (10% more TFLOP/s under the
# cap on s28a's H200) take fewer cycles, or the same cycles at less power? Details pages into $OUT (<= 8 files).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s31e}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
ncu=$(ncu_bin)
nvidia-smi --query-gpu=name --format=csv,noheader
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy"
timeout 240 $ncu -k regex:'^ws_rows_bmn$' --launch-count 2 $S -f -o /tmp/ours \
    .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b --tokens 16384 --engines ws --reps 1 --check-tokens 0 > $OUT/ncu-ours.log 2>&1
echo "== ncu ours rc $? at ${SECONDS}s"
ncu_cublas 131072 4096 3072 /tmp/cublas $OUT/ncu-cublas.log $S  # 235b's dX as one dense GEMM
for r in ours cublas; do ncu_summary /tmp/$r $OUT/$r-details.txt; done
echo "total ${SECONDS}s"
