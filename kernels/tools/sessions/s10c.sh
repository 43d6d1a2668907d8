#!/usr/bin/env bash
# Session 10, third call: the default kernels (unchanged since session 9) against the PyTorch baseline in the
# same call, both presets, for a third same-call sample of the ratio (session 8: 1.61x / 1.30x, session 9:
# 1.70x / 1.33x). The command is session 9's (s9a.sh).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s10c}; mkdir -p $OUT
bench() { # preset
    [ $SECONDS -gt 420 ] && return
    timeout 150 .gpu/bin/moe-oracle bench-gpu --preset $1 --tokens 16384 --engines ws --check-tokens 2 \
        --check-wgrad 128 --reps 10 --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-$1.log 2>&1
    echo "== bench $1 rc $? at ${SECONDS}s"
    grep -E "^fast|oracle|^\||speedup|ratio|baseline|torch" $OUT/bench-$1.log | grep -v route | cut -c1-160 | head -20
}
bench qwen3-30b-a3b
bench qwen3-235b-a22b
echo "total ${SECONDS}s"
