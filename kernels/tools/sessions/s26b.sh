#!/usr/bin/env bash
# Prepared in session 25 for session 26's second call, after s25c.sh (stage first: bash
# kernels/tools/stage_gpu.sh; carry [".gpu"]; at most ~9.5 minutes). Usage: VARIANT="..." bash
# kernels/tools/sessions/s26b.sh, with VARIANT the MOE_FAST_DEFINES of the padding skips' variant that s25c found
# clean in every racecheck run, e.g.
#   VARIANT="WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1 WS_SKIP_WAIT_BACKOFF=1000"
# (Session 26: not run. s25c found no clean variant: the warp-uniform poll, WS_SKIP_WAIT_UNIFORM, and the 1000 ns
# backoff each stalled in 2 of 4 racecheck runs; the uniform poll has since been removed.)
# What making it the default needs, in one call: every gpu_fast test with it (bitwise across engines and runs,
# against the oracle); racecheck on edge cases 10, 11, 12, 14 (the whole set gave no verdict in 90 s once on
# the skips, s24b), then twice more on case 10 with the launches traced (race_runs); memcheck on every edge shape; its A/B against the default on
# both presets (the skips alone: B/A 0.991 / 0.997 in s22a, 0.996 with the 64 ns backoff in s24b; a longer
# backoff may give some of it back).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s26b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
[ -n "${VARIANT:-}" ] || { echo "error: set VARIANT to the skips' defines (see the header)"; exit 2; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
echo "VARIANT: $VARIANT"
MOE_FAST_DEFINES="$VARIANT" gpu_fast_all
MOE_FAST_DEFINES="$VARIANT" sanitize_ws racecheck 90
race_runs variant "$VARIANT" 2 40
MOE_FAST_DEFINES="$VARIANT" memcheck_ws
AB_UNTIL=420 ab qwen3-30b-a3b 12 30b-variant "MOE_FAST_DEFINES=$VARIANT"
AB_UNTIL=470 ab qwen3-235b-a22b 6 235b-variant "MOE_FAST_DEFINES=$VARIANT"
echo total ${SECONDS}s
