#!/usr/bin/env bash
# Session 13, first call: is the 779 TFLOP/s bf16 matmul ceiling (anchors.md) a burst or a rate that GEMMs hold
# for milliseconds? cuBLAS (torch.matmul) in bursts and sustained, at 8192^3 and at the 30b layer's row-GEMM
# shapes, with nvidia-smi sampling; then the default fast kernels against the baseline (30b) in the same call.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s13a}; mkdir -p $OUT
echo "== matmul ceiling"
timeout 150 bash kernels/tools/smi_during.sh python3 kernels/tools/matmul_ceiling.py --seconds 2 2>&1 | tail -12
echo "== bench 30b at ${SECONDS}s"
timeout 200 bash kernels/tools/smi_during.sh .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws \
    --check-tokens 2 --check-wgrad 128 --reps 10 --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-30b.log 2>&1
echo "rc $?"
grep -E "^fast|oracle|^\||speedup|ratio|baseline|torch|nvidia-smi|SM MHz|sw_power" $OUT/bench-30b.log | grep -v route | cut -c1-180 | head -40
echo "total ${SECONDS}s"
