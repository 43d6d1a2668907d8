#!/usr/bin/env bash
# Session 31 (stage first; carry [".gpu"]; ~3 minutes): ncu on 235b's dA_raw and dX (both ws_rows_bmn) and on
# cuBLAS's kernel for the dense dX shape (131072 x 4096 x 3072, bf16, through torch), with ncu's default
# clock control (the same locked clock for both): at the same clock, does cuBLAS (10% more TFLOP/s under the
# cap on s28a's H200) take fewer cycles, or the same cycles at less power? Details pages into $OUT (<= 8 files).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s31e}; mkdir -p $OUT
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
nvidia-smi --query-gpu=name --format=csv,noheader
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy"
timeout 240 $ncu -k regex:'^ws_rows_bmn$' --launch-count 2 $S -f -o /tmp/ours \
    .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b --tokens 16384 --engines ws --reps 1 --check-tokens 0 > $OUT/ncu-ours.log 2>&1
echo "== ncu ours rc $? at ${SECONDS}s"
cat > /tmp/mm.py <<'PY'
import torch
M, N, K = 131072, 4096, 3072  # 235b's dX as one dense GEMM
a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
for _ in range(4):
    c = a @ b
torch.cuda.synchronize()
PY
timeout 120 $ncu -k regex:nvjet --launch-skip 2 --launch-count 1 $S -f -o /tmp/cublas python3 /tmp/mm.py > $OUT/ncu-cublas.log 2>&1
echo "== ncu cublas rc $? at ${SECONDS}s"
for r in ours cublas; do
    $ncu -i /tmp/$r.ncu-rep --page details > $OUT/$r-details.txt 2>&1
    echo "== $r"
    grep -E "^  [a-z_]|ws_rows_bmn|nvjet|Duration|SM Frequency|Elapsed Cycles|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|DRAM Throughput|Executed Ipc Active|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler|Warp Cycles Per Issued|Registers Per Thread|Block Size|Grid Size|Cluster Size|Shared Memory Configuration Size|Dynamic Shared Memory Per Block|L2 Hit Rate|Mem Busy|Max Bandwidth" $OUT/$r-details.txt | head -70
done
echo "total ${SECONDS}s"
