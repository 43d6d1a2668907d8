#!/usr/bin/env bash
# Session 10, second call: the two switches measured to help the 235b GEMMs a little (session 9: GEMM1 by TMA
# after a row copy, `MOE_FAST_GEMM1_GATHER_FIRST=1`; every GEMM clustered, `MOE_FAST_CLUSTERED=all`), as A/B
# pairs in one process each (`bench-gpu --ab`: A the default, B with the setting, interleaved rounds),
# 235b first, then the combination on 30b.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s10b}; mkdir -p $OUT
ab() { # preset reps label setting
    [ $SECONDS -gt 480 ] && return
    local s=$SECONDS
    timeout 150 .gpu/bin/moe-oracle bench-gpu --preset $1 --tokens 16384 --engines ws --reps $2 --check-tokens 1 \
        --check-wgrad 16 --ab "$4" > $OUT/ab-$3.log 2>&1
    echo "=== $1 [$4] rc $? $((SECONDS - s)) s"
    grep -E "^A/B|^B/A|gemm1|wgrad|dX_rows|dA_raw|gemm2|gather|^outputs|^oracle|rror" $OUT/ab-$3.log | cut -c1-150
}
ab qwen3-235b-a22b 12 235-gf "MOE_FAST_GEMM1_GATHER_FIRST=1"
ab qwen3-235b-a22b 12 235-cl "MOE_FAST_CLUSTERED=all"
ab qwen3-235b-a22b 12 235-both "MOE_FAST_GEMM1_GATHER_FIRST=1; MOE_FAST_CLUSTERED=all"
ab qwen3-30b-a3b 20 30-both "MOE_FAST_GEMM1_GATHER_FIRST=1; MOE_FAST_CLUSTERED=all"
echo "total ${SECONDS}s"
