#!/usr/bin/env bash
# Session 33, second call (same build as s33a): the rounds against the PyTorch baseline. On an H200 the burst
# rounds of both presets (the issue's own method), then heated rounds of both; on another card nothing, or
# with S33B_ANY_CARD=1 the heated round of 235b (as it ran in session 33: s33a ran 30b's). Stage first; carry [".gpu"]; 2-7 minutes; no round starts after UNTIL s
# (default 400).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s33b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
UNTIL=${UNTIL:-400}
nvidia-smi --query-gpu=name --format=csv,noheader
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
    *H200*) h200_burst $UNTIL burst; baselines $UNTIL heated ;;
    *) [ -n "${S33B_ANY_CARD:-}" ] && bench_round qwen3-235b-a22b 3000 heated-235b || echo "not an H200: nothing to do" ;;
esac
echo "total ${SECONDS}s"
