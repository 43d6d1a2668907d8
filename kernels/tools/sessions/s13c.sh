#!/usr/bin/env bash
# Session 13, third call: where 235b's GEMMs lose against cuBLAS (dX 406 and GEMM1 421 TFLOP/s in s13b, at a
# 1965 MHz median clock, i.e. not power-capped, against cuBLAS's 683-700 sustained at the same shapes): cycle
# counts per phase (WS_EXP_CLOCKS: main loop, of it waiting for a full stage, epilogue) for 235b and 30b.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
b() { timeout 120 .gpu/bin/moe-oracle bench-gpu --preset ${P:-qwen3-30b-a3b} --tokens 16384 --engines ws --reps ${R:-10} \
    --check-tokens 1 --check-wgrad 32 2>&1 | grep -E "fast forward|^  [gdws]|oracle|error|wsclk|wsspan" | cut -c1-170; }
for p in qwen3-235b-a22b qwen3-30b-a3b; do
    echo "=== $p WS_EXP_CLOCKS at ${SECONDS}s"; P=$p R=3 MOE_FAST_DEFINES="WS_EXP_CLOCKS" b | grep -E "^  [gdws]|wsclk|wsspan|fast forward" | tail -24
done
echo "total ${SECONDS}s"
