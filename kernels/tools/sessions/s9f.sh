#!/usr/bin/env bash
# Session 9, sixth call (run inline through the device tool): 235b with the weight-gradient GEMM clustered
# against the default, two rounds.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
for c in ws_wgrad none ws_wgrad none; do
    [ $SECONDS -gt 120 ] && break
    echo "=== 235b clustered [$c] at ${SECONDS}s"
    MOE_FAST_CLUSTERED=$c timeout 60 .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b --tokens 16384 --engines ws --reps 10 \
        --check-tokens 1 --check-wgrad 32 2>&1 | grep -E "fast forward|wgrad|oracle|error" | cut -c1-120
done
