#!/usr/bin/env bash
# Session 22, first call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; ~7 minutes).
# 1. racecheck: the default still has 36 hazard reports in ws_rows_bmn (s21b: ws_copy_box's shared loads of
#    dA_raw's side tiles against the producer's cp.async writes; the report does not say which direction).
#    Two candidate fixes, built in session 21 and never run: WS_SIDE_LANE_RELEASE=1 (write-after-read: every lane
#    arrives on the empty barrier for its own loads) and WS_SIDE_WAIT_ARRIVE=1 (read-after-write: the producer
#    waits for its own copies and arrives plainly). racecheck on edge case 11 for the default and the three
#    combinations, and WS_SIDE_PRODUCER=1 (session 22: no consumer loads of the stage at all); the first clean one (fewest switches) then gets every gpu_fast test, memcheck and its cost on
#    both presets (A = with it, B = the default). Make it the default if all pass and it costs nothing.
# (gpu_fast's scheduler test also runs both fixes together, plain and clustered, bitwise against the default.)
# 2. WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1 (the padding skips without dX, which they slowed in s21a/s21b).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s22a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
fix=""
for d in "" "WS_SIDE_LANE_RELEASE=1" "WS_SIDE_WAIT_ARRIVE=1" "WS_SIDE_LANE_RELEASE=1 WS_SIDE_WAIT_ARRIVE=1" "WS_SIDE_PRODUCER=1"; do
    MOE_FAST_DEFINES="$d" MOE_FAST_CASES=11 MOE_FAST_ENGINES=ws timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool racecheck \
        --racecheck-report all .gpu/bin/gpu_fast --test-threads=1 --nocapture fast_layer_matches_the_oracle_on_edge_shapes > "$OUT/race-${d// /+}.log" 2>&1
    rc=$?
    sum=$(grep -E "RACECHECK SUMMARY" "$OUT/race-${d// /+}.log")
    echo "== racecheck case 11 [$d] rc $rc at ${SECONDS}s: $sum"
    grep -m3 -iE "hazard|Race reported" "$OUT/race-${d// /+}.log" | cut -c1-200
    if [ -n "$d" ] && [ -z "$fix" ] && echo "$sum" | grep -q " 0 hazards"; then fix="$d"; fi
done
echo "== first clean fix: [$fix]"
if [ -n "$fix" ]; then
    export MOE_FAST_DEFINES="$fix"
    racecheck_ws
    gpu_fast_all
    memcheck_ws
    AB_UNTIL=360
    ab qwen3-30b-a3b 10 30b-fix "MOE_FAST_DEFINES="
    ab qwen3-235b-a22b 6 235b-fix "MOE_FAST_DEFINES="
    unset MOE_FAST_DEFINES
fi
AB_UNTIL=480
ab qwen3-30b-a3b 10 30b-skip2 "MOE_FAST_DEFINES=WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1"
ab qwen3-235b-a22b 8 235b-skip2 "MOE_FAST_DEFINES=WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1"
echo total ${SECONDS}s
