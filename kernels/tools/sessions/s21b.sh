#!/usr/bin/env bash
# Session 21, second call (stage first; carry [".gpu"]). s21a: the two skips together gave 30b B/A 0.993 and 235b
# 1.003, with 235b's dX 1.058 against 0.99 for every other GEMM: the warpgroup skip alone on 235b, 30b again if
# time allows (AB_UNTIL); then
# racecheck on the two edge cases with dA_raw side tiles over several row tiles (MOE_FAST_CASES=11,14; the whole
# edge-shape test ran past 300 s under racecheck in s21a, past 150 s in s20f, 102 s in s20e before the fix).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s21b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
AB_UNTIL=60
ab qwen3-235b-a22b 10 235b-wg "MOE_FAST_DEFINES=WS_SKIP_EMPTY_WG=1"
ab qwen3-30b-a3b 12 30b-both "MOE_FAST_DEFINES=WS_SKIP_EMPTY_WG=1 WS_SKIP_EMPTY_K=1"
s=$SECONDS
MOE_FAST_CASES=11,14 MOE_FAST_ENGINES=ws timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool racecheck --error-exitcode 9 \
    .gpu/bin/gpu_fast --test-threads=1 --nocapture fast_layer_matches_the_oracle_on_edge_shapes > $OUT/cs-racecheck.log 2>&1
echo "== racecheck (ws engine, edge cases 11 and 14) rc $? $((SECONDS - s)) s"
grep -E "RACECHECK SUMMARY|Race reported|case seed|test result" $OUT/cs-racecheck.log | head -8
echo total ${SECONDS}s
