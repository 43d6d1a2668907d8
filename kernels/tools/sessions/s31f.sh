#!/usr/bin/env bash
# Session 31 (stage first; carry [".gpu"]; ~2 minutes): the instruction mix of 235b's dX (ws_rows_bmn, second
# launch) against cuBLAS's kernel for the dense dX shape (s31e: at the same locked clock ours executes 1.02
# warp instructions per cycle, cuBLAS's 0.66, and takes 5% more cycles). kernels/tools/ncu_inst_mix.py.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s31f}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
ncu=$(ncu_bin)
nvidia-smi --query-gpu=name --format=csv,noheader
MOE_FAST_LINEINFO=1 timeout 200 $ncu -k regex:'^ws_rows_bmn$' --launch-skip 1 --launch-count 1 --section SourceCounters --section InstructionStats -f -o /tmp/ours \
    .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b --tokens 16384 --engines ws --reps 1 --check-tokens 0 > $OUT/ncu-ours.log 2>&1
echo "== ncu ours rc $? at ${SECONDS}s"
ncu_cublas 131072 4096 3072 /tmp/cublas $OUT/ncu-cublas.log --section SourceCounters --section InstructionStats  # 235b's dX, dense
for r in ours cublas; do
    $ncu -i /tmp/$r.ncu-rep --page source --csv --print-source sass > /tmp/$r-sass.csv 2>&1
    python3 kernels/tools/ncu_inst_mix.py /tmp/$r-sass.csv 22 > $OUT/$r-mix.txt 2>&1
    $ncu -i /tmp/$r.ncu-rep --page details > $OUT/$r-details.txt 2>&1
    echo "== $r"; cat $OUT/$r-mix.txt | head -50
    grep -E "Executed Instructions|Issued Instructions|Elapsed Cycles|Duration" $OUT/$r-details.txt | head -6
done
echo "total ${SECONDS}s"
