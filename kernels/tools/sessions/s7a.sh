#!/usr/bin/env bash
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=.gpu/bin
for preset in qwen3-30b-a3b qwen3-235b-a22b; do
for d in "" "WS_EXP_NO_READ_WAIT" "WS_STAGES=3 WS_STAGE_OUT_BYTES=32768" "WS_STAGES=3 WS_STAGE_OUT_BYTES=40960" "WS_STAGGER_NS=2500" "WS_EXP_NO_TMA_ISSUE"; do
    [ $SECONDS -gt 420 ] && break
    [ $preset = qwen3-235b-a22b ] && [ "$d" = WS_EXP_NO_TMA_ISSUE ] && continue
    echo "=== $preset [$d] at ${SECONDS}s"
    MOE_FAST_DEFINES="$d" timeout 80 $B/moe-oracle bench-gpu --preset $preset --tokens 16384 --engines ws \
        --check-tokens 1 --check-wgrad 32 --reps 5 2>&1 | grep -E "fast forward|^  [gdw]|error|oracle"
done
done
echo total ${SECONDS}s
