#!/usr/bin/env bash
# Session 31 (stage first; carry [".gpu"]; ~2 minutes): the instruction mix of 235b's dX (ws_rows_bmn, second
# launch) against cuBLAS's kernel for the dense dX shape (s31e: at the same locked clock ours executes 1.02
# warp instructions per cycle, cuBLAS's 0.66, and takes 5% more cycles). kernels/tools/ncu_inst_mix.py.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s31f}; mkdir -p $OUT
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
nvidia-smi --query-gpu=name --format=csv,noheader
MOE_FAST_LINEINFO=1 timeout 200 $ncu -k regex:'^ws_rows_bmn$' --launch-skip 1 --launch-count 1 --section SourceCounters --section InstructionStats -f -o /tmp/ours \
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
timeout 120 $ncu -k regex:nvjet --launch-skip 2 --launch-count 1 --section SourceCounters --section InstructionStats -f -o /tmp/cublas python3 /tmp/mm.py > $OUT/ncu-cublas.log 2>&1
echo "== ncu cublas rc $? at ${SECONDS}s"
for r in ours cublas; do
    $ncu -i /tmp/$r.ncu-rep --page source --csv --print-source sass > /tmp/$r-sass.csv 2>&1
    python3 kernels/tools/ncu_inst_mix.py /tmp/$r-sass.csv 22 > $OUT/$r-mix.txt 2>&1
    $ncu -i /tmp/$r.ncu-rep --page details > $OUT/$r-details.txt 2>&1
    echo "== $r"; cat $OUT/$r-mix.txt | head -50
    grep -E "Executed Instructions|Issued Instructions|Elapsed Cycles|Duration" $OUT/$r-details.txt | head -6
done
echo "total ${SECONDS}s"
