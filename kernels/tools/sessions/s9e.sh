#!/usr/bin/env bash
# Session 9, fifth call (run inline through the device tool): memcheck and racecheck on the default kernels (no
# clusters), ws engine, gpu_fast's edge cases.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64; export REQUIRE_GPU=1
OUT=${OUT:-/tmp/s9e}; mkdir -p $OUT
for t in memcheck racecheck; do
    s=$SECONDS
    MOE_FAST_CLUSTERED=none MOE_FAST_ENGINES=ws timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool $t --error-exitcode 9 \
        .gpu/bin/gpu_fast --test-threads=1 fast_layer_matches_the_oracle_on_edge_shapes > $OUT/cs-$t.log 2>&1
    echo "== $t (default: no clusters, ws engine, edge cases) rc $? $((SECONDS-s)) s"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result" $OUT/cs-$t.log | head -3
done
