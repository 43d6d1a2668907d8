#!/usr/bin/env bash
# Session 22, third call (~3 minutes): s22b's racecheck of the new default (lane releases + padding skips) ran
# past 300 s without finishing edge case 10 (s22a: 6.5 s with the lane releases alone). Which skip does it:
# racecheck on case 10 with the default, without each skip and without both, 40 s each.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s22c}; mkdir -p $OUT
for d in "" "WS_SKIP_EMPTY_WG=0" "WS_SKIP_EMPTY_K=0" "WS_SKIP_EMPTY_WG=0 WS_SKIP_EMPTY_K=0"; do
    s=$SECONDS
    MOE_FAST_DEFINES="$d" MOE_FAST_CASES=10 MOE_FAST_ENGINES=ws timeout 40 /usr/local/cuda/bin/compute-sanitizer --tool racecheck \
        .gpu/bin/gpu_fast --test-threads=1 --nocapture fast_layer_matches_the_oracle_on_edge_shapes > "$OUT/race.log" 2>&1
    echo "== racecheck case 10 [$d] rc $? $((SECONDS - s)) s: $(grep -E 'case seed|RACECHECK SUMMARY' $OUT/race.log | tr '\n' ' ' | cut -c1-200)"
done
echo total ${SECONDS}s
