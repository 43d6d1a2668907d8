#!/usr/bin/env bash
# Session 13, second call: the same question for qwen3-235b-a22b, whose GEMMs ran ~100 TFLOP/s below 30b's in
# sessions 8-10: cuBLAS sustained at 235b's row-GEMM shapes, then the fast kernels against the baseline (235b).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s13b}; mkdir -p $OUT
echo "== matmul ceiling 235b"
timeout 150 bash kernels/tools/smi_during.sh python3 kernels/tools/matmul_ceiling.py --seconds 2 --preset qwen3-235b-a22b 2>&1 | tail -10
echo "== bench 235b at ${SECONDS}s"
timeout 300 bash kernels/tools/smi_during.sh .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b --tokens 16384 --engines ws \
    --check-tokens 2 --check-wgrad 128 --reps 10 --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-235b.log 2>&1
echo "rc $?"
grep -E "^fast|oracle|^\||speedup|ratio|baseline|torch|nvidia-smi|SM MHz|sw_power|^  [a-z]" $OUT/bench-235b.log | cut -c1-200 | head -40
echo "total ${SECONDS}s"
