#!/usr/bin/env bash
# Session 20 (after `cargo +nightly fuzz build gpu_fast --release` and `bash kernels/tools/stage_gpu.sh`, which
# stages the fuzz target; carry [".gpu"]): the landed build under compute-sanitizer racecheck (the ws engine's
# edge shapes) and the gpu_fast fuzz target (each input a layer forward+backward checked against the oracle and
# run twice, NaN-poisoned, for bitwise equality), starting from the committed corpus.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s20e}; mkdir -p $OUT
s=$SECONDS
MOE_FAST_ENGINES=ws timeout 200 /usr/local/cuda/bin/compute-sanitizer --tool racecheck --error-exitcode 9 .gpu/bin/gpu_fast --test-threads=1 \
    fast_layer_matches_the_oracle_on_edge_shapes > $OUT/cs-racecheck.log 2>&1
echo "== racecheck (ws engine, edge shapes) rc $? $((SECONDS - s)) s"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|test result" $OUT/cs-racecheck.log | head -3
mkdir -p /tmp/gpu_fast_corpus && cp -r fuzz/corpus/gpu_fast/. /tmp/gpu_fast_corpus/ 2>/dev/null
n0=$(ls /tmp/gpu_fast_corpus | wc -l)
ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 REQUIRE_GPU=1 timeout 200 .gpu/fuzz/gpu_fast -max_total_time=170 -max_len=64 \
    /tmp/gpu_fast_corpus > $OUT/fuzz.log 2>&1
echo "== fuzz gpu_fast rc $? (corpus $n0 -> $(ls /tmp/gpu_fast_corpus | wc -l) units)"
grep -E "^#[0-9]+.*(DONE|pulse)|panicked|SUMMARY|crash-" $OUT/fuzz.log | tail -4
tar czf $OUT/corpus.tgz -C /tmp gpu_fast_corpus  # (one archive: a call brings back a limited number of files)
echo total ${SECONDS}s
