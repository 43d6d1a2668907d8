#!/usr/bin/env bash
# Session 21, third call (stage first; carry [".gpu"]). s21b: racecheck still reported 36 hazards in ws_rows_bmn
# with session 20's fix (ws_copy_box's loads against the producer's cp.async refill): racecheck does not carry
# the other lanes' reads through the __syncwarp to lane 0's arrival. WS_SIDE_LANE_RELEASE=1 (off by default):
# every lane arrives for itself on side tiles (the empty barriers count 32 per warp; lane 0 arrives with 32
# elsewhere). With it: racecheck on edge cases 11 and 14, the edge-shape and scheduler tests, then its cost on
# 30b (A = with it, B = the default).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s21c}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
export MOE_FAST_DEFINES=WS_SIDE_LANE_RELEASE=1
s=$SECONDS
MOE_FAST_CASES=11,14 MOE_FAST_ENGINES=ws timeout 80 /usr/local/cuda/bin/compute-sanitizer --tool racecheck --error-exitcode 9 \
    .gpu/bin/gpu_fast --test-threads=1 --nocapture fast_layer_matches_the_oracle_on_edge_shapes > $OUT/cs-racecheck.log 2>&1
echo "== racecheck (ws engine, edge cases 11 and 14, WS_SIDE_LANE_RELEASE=1) rc $? $((SECONDS - s)) s"
grep -E "RACECHECK SUMMARY|Race reported|case seed|test result" $OUT/cs-racecheck.log | head -8
REQUIRE_GPU=1 timeout 100 .gpu/bin/gpu_fast --test-threads=1 fast_layer_matches_the_oracle_on_edge_shapes the_dynamic_tile_scheduler_changes_no_bits > $OUT/gpu_fast.log 2>&1
echo "== gpu_fast (edge shapes, scheduler; WS_SIDE_LANE_RELEASE=1) rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast.log | cut -c1-300 | head -6
AB_UNTIL=170
ab qwen3-30b-a3b 8 30b-lane "MOE_FAST_DEFINES=WS_SIDE_LANE_RELEASE=0"
echo total ${SECONDS}s
