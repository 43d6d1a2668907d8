#!/usr/bin/env bash
# Session 34, third call (build of s34b, fuzz target staged): the gpu_fast fuzz target again, with inputs of
# the full length from the start (`-len_control=0`: in s34b libFuzzer kept inputs at 4 bytes, so every later
# byte read 0 and the runs were plain SwiGLU, k = 1, one engine), starting from the committed seeds in
# fuzz/corpus/gpu_fast (added after s34c ran). FUZZ_S seconds (default 110); carry [".gpu"].
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s34c}; mkdir -p $OUT /tmp/gpu_fast_corpus
cp fuzz/corpus/gpu_fast/* /tmp/gpu_fast_corpus/ 2>/dev/null  # the committed seeds (named shapes), first
F=${FUZZ_S:-110}
ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 REQUIRE_GPU=1 timeout $F .gpu/fuzz/gpu_fast -max_total_time=$((F - 25)) \
    -max_len=16 -len_control=0 -rss_limit_mb=8192 -artifact_prefix=$OUT/ /tmp/gpu_fast_corpus > $OUT/fuzz.log 2>&1
echo "== fuzz gpu_fast rc $? ($(ls /tmp/gpu_fast_corpus | wc -l) corpus units) at ${SECONDS}s"
grep -E "^#[0-9]+.*(DONE|pulse)|panicked|SUMMARY|crash-" $OUT/fuzz.log | tail -4
